"""One audit pass: read the evidence, run every check, say which ran, move the position.

``audit(target, position)`` is what the operator calls on each pipeline's interval and what
``eo audit`` prints. It reads the decisions after the position (at most ``max_batches`` per
query, so a pass has a bounded cost however far behind it is), then each sink database once,
then the checkpoint when it can see it. A check that could not run is listed with the reason;
it is never counted as passed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import psycopg
import pymysql

from eo_jobs.audit import counts, coverage, decisions, participants, sums
from eo_jobs.audit import evidence as pg_evidence
from eo_jobs.audit.checkpoint import LocalCheckpoint, UnreadableCheckpointError, local_folder
from eo_jobs.audit.counts import few
from eo_jobs.audit.evidence import (
    ControlEvidence,
    LoggedDecision,
    SinkEvidence,
    read_sink,
)
from eo_jobs.audit.model import (
    AuditResult,
    AuditTarget,
    Check,
    CheckRun,
    Position,
    SinkTarget,
    Status,
    Violation,
)
from eo_jobs.audit.mysql_control_evidence import read_mysql_control, read_mysql_decisions_of
from eo_jobs.audit.mysql_evidence import read_mysql_sink
from eo_jobs.protocol import databases
from eo_jobs.protocol.gid import sink_token
from eo_jobs.spec.models import DEAD_LETTER_SINK


@dataclass
class _Pass:
    """The state of one pass while its checks run."""

    target: AuditTarget
    start: Position
    control: ControlEvidence
    by_query: dict[str, list[LoggedDecision]]
    query_ids: dict[str, str]
    checks: list[CheckRun]
    violations: list[Violation]
    unreadable: list[str] = field(default_factory=list)
    """Sink databases that could not be read: the position stays, so the next pass checks
    these batches again rather than never."""
    late: list[LoggedDecision] = field(default_factory=list)
    """Decisions of markers above the batches this pass read, read after the sinks."""

    def ran(self, check: Check, subject: str, status: Status, detail: str = "") -> None:
        self.checks.append(CheckRun(check, subject, status, detail))


def read_control(
    dsn: str, pipeline: str, positions: Mapping[str, int], max_batches: int | None
) -> ControlEvidence:
    """The control database's evidence, read as its kind (``protocol.databases.kind``)."""
    if databases.kind(dsn) == "mysql":
        return read_mysql_control(dsn, pipeline, positions, max_batches)
    return pg_evidence.read_control(dsn, pipeline, positions, max_batches)


def read_decisions_of(
    dsn: str, pipeline: str, batches: Iterable[int], has_sums: bool = True
) -> list[LoggedDecision]:
    """Decisions of these batch ids, read as the control database's kind."""
    if databases.kind(dsn) == "mysql":
        return read_mysql_decisions_of(dsn, pipeline, batches)
    return pg_evidence.read_decisions_of(dsn, pipeline, batches, has_sums)


def audit(
    target: AuditTarget, position: Position | None = None, *, max_batches: int | None = None
) -> AuditResult:
    """Audit every batch decided after ``position`` (None: from each query's first batch)."""
    started, cpu = time.perf_counter(), time.thread_time()
    start = position or Position()
    control = read_control(target.control_dsn, target.pipeline, start.batches, max_batches)
    if not control.has_tables:
        return _nothing(target, start, started, cpu)
    by_query: dict[str, list[LoggedDecision]] = {}
    query_ids: dict[str, str] = {}
    for decision in control.decisions:
        by_query.setdefault(decision.token, []).append(decision)
        query_ids[decision.token] = decision.query_id
    state = _Pass(target, start, control, by_query, query_ids, [], [])
    positions = {t: start.batch(t) for t in {*start.batches, *by_query}}
    upper = {t: ds[-1].batch_id for t, ds in by_query.items()}
    audited = [d for t, ds in by_query.items() for d in ds if d.batch_id > start.batch(t)]

    _log_checks(state, audited)
    _checkpoint_checks(state)

    sinks = _read_sinks(state, positions)
    found = _participant_checks(state, audited, positions, upper, sinks)
    end_batches = _advance(state, upper, found, sinks)
    pending = [
        f"query {query_ids[t]}: batches {few(sorted(set(b)))} still committing (phase 2)"
        for t, b in found.pending.items()
        if b
    ]
    table_rows, table_sums = _table_checks(state, sinks, end_batches, upper, found)
    end = Position(end_batches, table_rows, table_sums)
    if state.unreadable:
        end = start
        pending.append(
            f"position kept: {', '.join(state.unreadable)} could not be read, so this pass's "
            "batches are audited again by the next"
        )
    return AuditResult(
        pipeline=target.pipeline,
        start=start,
        end=end,
        batches=len(audited),
        last_batch=dict(control.last_batch),
        checks=tuple(state.checks),
        violations=tuple(sorted(state.violations, key=_order)),
        pending=tuple(pending),
        seconds=time.perf_counter() - started,
        cpu_seconds=time.thread_time() - cpu,
    )


def _log_checks(state: _Pass, audited: list[LoggedDecision]) -> None:
    """The decision log and the source offsets it records, per query."""
    target, start, control, by_query = state.target, state.start, state.control, state.by_query
    for token, ds in by_query.items():
        state.violations.extend(
            decisions.check_decisions(target.pipeline, ds, start.batch(token), control.fence)
        )
        state.violations.extend(coverage.check_offsets(ds, start.batch(token)))
    gone = [t for t in start.batches if t not in by_query and start.batch(t) >= 0]
    for token in gone:
        state.violations.append(
            Violation(
                Check.DECISION_LOG,
                start.batch(token),
                token,
                f"every decision of query {token} is gone (audited up to batch "
                f"{start.batch(token)}), e.g. deleted by eo forget-query: the evidence of its "
                "batches no longer exists",
            )
        )
    state.ran(Check.DECISION_LOG, "control database", Status.RAN)
    without = [d.batch_id for d in audited if not d.source_offsets]
    unknown = [d.batch_id for d in audited if coverage.unrecognised(d)]
    detail = "; ".join(
        text
        for text in (
            f"batches without recorded offsets: {few(without)}" if without else "",
            f"offsets of a source this audit cannot read: batches {few(unknown)}"
            if unknown
            else "",
        )
        if text
    )
    status = Status.PARTIAL if detail else Status.RAN
    state.ran(Check.SOURCE_COVERAGE, "decision log", status, detail)


def _table_checks(
    state: _Pass,
    sinks: Mapping[str, SinkEvidence],
    end_batches: Mapping[str, int],
    upper: Mapping[str, int],
    found: participants.ParticipantFindings,
) -> tuple[dict[str, int], dict[str, dict[str, str]]]:
    """Count, batch-column and sum checks per sink; returns the next pass's count and sum
    baselines."""
    start, target, query_ids = state.start, state.target, state.query_ids
    now = state.control.now
    fresh = [
        d.decided_at for t, ds in state.by_query.items() for d in ds if d.batch_id > start.batch(t)
    ]
    oldest = (now - min(fresh)).total_seconds() if now is not None and fresh else None
    table_rows = dict(start.table_rows)
    table_sums = {k: dict(v) for k, v in start.table_sums.items()}
    logged = {(d.token, d.batch_id): d for d in (*state.control.decisions, *state.late)}
    has_sums = state.control.has_sums
    top = max(upper.values(), default=None)
    for sink in target.sinks:
        evidence = sinks.get(sink_token(sink.name))
        if evidence is None:
            continue
        run, bad, baseline = counts.check_count(
            sink,
            evidence,
            start,
            end_batches,
            upper,
            top,
            found.without_participants,
            oldest,
        )
        state.checks.append(run)
        state.violations.extend(bad)
        if baseline is not None:
            table_rows[sink.name] = baseline
        batch_run, bad = counts.check_batch_column(
            sink, evidence, found.rows, found.complete, query_ids
        )
        if batch_run is not None:
            state.checks.append(batch_run)
            state.violations.extend(bad)
        sum_run, bad = sums.check_batch_sums(
            sink, evidence, logged, found.complete, query_ids, has_sums
        )
        if sum_run is not None:
            state.checks.append(sum_run)
            state.violations.extend(bad)
        sum_run, bad, sums_next = sums.check_table_sums(
            sink,
            evidence,
            start,
            end_batches,
            logged,
            upper,
            top,
            found.without_participants,
            oldest,
            has_sums,
        )
        if sum_run is not None:
            state.checks.append(sum_run)
            state.violations.extend(bad)
        if sums_next is not None:
            table_sums[sink.name] = sums_next
        else:
            table_sums.pop(sink.name, None)
    return table_rows, table_sums


def _participant_checks(
    state: _Pass,
    audited: list[LoggedDecision],
    positions: Mapping[str, int],
    upper: Mapping[str, int],
    sinks: Mapping[str, SinkEvidence],
) -> participants.ParticipantFindings:
    """Participants committed, none stuck prepared, no marker without a decision."""
    now = state.control.now or max((s.now for s in sinks.values() if s.now), default=None)
    assert now is not None
    found = participants.check_participants(
        audited, positions, sinks, now, state.target.prepared_bound_seconds
    )
    state.violations.extend(found.violations)
    detail = "; ".join(found.unverifiable[:5]) + (" ..." if len(found.unverifiable) > 5 else "")
    if found.without_participants:
        detail = (
            f"batches {few(found.without_participants)} have rows but no participants (at-least-"
            "once or idempotent: the tasks committed their rows, with no markers)"
            + (f"; {detail}" if detail else "")
        )
    partly = bool(found.unverifiable or found.without_participants)
    status = Status.PARTIAL if partly else Status.RAN
    state.ran(Check.PARTICIPANTS, "sink databases", status, detail)
    state.ran(Check.PREPARED, "sink databases", Status.RAN)
    above = [
        m.batch_id
        for sink in sinks.values()
        for m in sink.markers.values()
        if m.batch_id > upper.get(m.parsed.query, -1)
    ]
    late = read_decisions_of(
        state.target.control_dsn, state.target.pipeline, above, state.control.has_sums
    )
    state.late = late
    state.violations.extend(
        participants.check_orphans(
            state.control.decisions, positions, upper, sinks, state.query_ids, late
        )
    )
    state.ran(Check.ORPHAN_MARKERS, "sink databases", Status.RAN)
    return found


def _advance(
    state: _Pass,
    upper: Mapping[str, int],
    found: participants.ParticipantFindings,
    sinks: Mapping[str, SinkEvidence],
) -> dict[str, int]:
    """The next position: per query, the last batch before one still committing.

    A query with no decision but markers (reported as orphans) moves past them, so they are
    reported once.
    """
    start = state.start
    end = dict(start.batches)
    for token, top in upper.items():
        waiting = sorted(set(found.pending.get(token, [])))
        end[token] = max(start.batch(token), (waiting[0] - 1) if waiting else top)
    for sink in sinks.values():
        for marker in sink.markers.values():
            token = marker.parsed.query
            if token not in upper and marker.batch_id > end.get(token, -1):
                end[token] = marker.batch_id
    return end


def _order(v: Violation) -> tuple[bool, int, str]:
    return (v.batch is None, v.batch or 0, str(v.check))


def _read_sinks(state: _Pass, positions: Mapping[str, int]) -> dict[str, SinkEvidence]:
    """Each sink's evidence by its gid token; a sink that cannot be read is listed as not run."""
    target = state.target
    read: dict[str, SinkEvidence] = {}
    wanted: list[tuple[str, str, SinkTarget | None]] = [(s.name, s.dsn, s) for s in target.sinks]
    wanted.append((DEAD_LETTER_SINK, target.dead_letters_dsn(), None))
    for name, dsn, sink in wanted:
        counted = sink is not None and sink.append_only
        per_batch = sink is not None and sink.per_batch
        whole = sink is not None and bool(sink.sum_columns) and (counted or sink.accumulates)
        summed = sink is not None and bool(sink.sum_columns) and (whole or per_batch)
        reader = read_mysql_sink if databases.kind(dsn) == "mysql" else read_sink
        try:
            read[sink_token(name)] = reader(
                dsn,
                target.pipeline,
                name,
                positions,
                table=sink.table if (counted or summed or per_batch) and sink else None,
                batch_column=sink.batch_column if per_batch and sink else None,
                sum_columns=sink.sum_columns if summed and sink else (),
                whole_table=counted or whole,
            )
        except (psycopg.Error, pymysql.Error) as exc:
            why = f"cannot read its database: {' '.join(str(exc).split())}"
            state.unreadable.append(f"sink {name}")
            checks = [Check.PARTICIPANTS, Check.ORPHAN_MARKERS, Check.TABLE_COUNT]
            if sink is not None and sink.sum_columns:
                checks.append(Check.SUM_COLUMNS)
            for check in checks:
                state.ran(check, name, Status.NOT_RUN, why)
    return read


def _checkpoint_checks(state: _Pass) -> None:
    """Decisions against Spark's offset log, and the file source's files, where readable."""
    location = state.target.checkpoint
    if location is None:
        why = "no checkpoint location given"
        state.ran(Check.SOURCE_FILES, "checkpoint", Status.NOT_RUN, why)
        return
    folder = local_folder(location)
    if folder is None or not folder.is_dir():
        why = (
            f"{location} is in an object store, which only Spark's Hadoop FileSystem reads (the "
            "auditor does not load Spark)"
            if folder is None
            else f"{location} is not a folder on this machine (mount the checkpoint's volume)"
        )
        state.ran(Check.SOURCE_FILES, "checkpoint", Status.NOT_RUN, why)
        return
    checkpoint = LocalCheckpoint(folder)
    try:
        query_id = checkpoint.query_id()
    except (UnreadableCheckpointError, ValueError, KeyError) as exc:
        state.ran(Check.SOURCE_FILES, "checkpoint", Status.NOT_RUN, str(exc))
        return
    token = next((t for t, q in state.query_ids.items() if q == query_id), None)
    if token is None:
        state.ran(
            Check.SOURCE_FILES,
            "checkpoint",
            Status.NOT_RUN,
            f"the checkpoint's query {query_id} has no decision in this pass",
        )
        return
    ds = state.by_query[token]
    position = state.start.batch(token)
    bad, gone = coverage.check_against_checkpoint(ds, position, checkpoint)
    state.violations.extend(bad)
    state.ran(
        Check.SOURCE_COVERAGE,
        "checkpoint offsets",
        Status.PARTIAL if gone else Status.RAN,
        f"Spark no longer keeps the offsets of batches {few(gone)}" if gone else "",
    )
    if not any(coverage.log_offset((d.source_offsets or [None])[0]) is not None for d in ds):
        state.ran(Check.SOURCE_FILES, "checkpoint", Status.NOT_RUN, "the source is not files")
        return
    try:
        state.violations.extend(coverage.check_files(ds, position, checkpoint))
    except (UnreadableCheckpointError, ValueError, KeyError) as exc:
        state.ran(Check.SOURCE_FILES, "checkpoint", Status.NOT_RUN, str(exc))
        return
    state.ran(Check.SOURCE_FILES, "checkpoint", Status.RAN)


def _nothing(target: AuditTarget, start: Position, started: float, cpu: float) -> AuditResult:
    """A control database without eo's tables: nothing was decided there, nothing ran."""
    why = "the control database has no eo.decisions: the pipeline never decided a batch there"
    return AuditResult(
        pipeline=target.pipeline,
        start=start,
        end=start,
        batches=0,
        last_batch={},
        checks=tuple(CheckRun(c, "control database", Status.NOT_RUN, why) for c in Check),
        violations=(),
        seconds=time.perf_counter() - started,
        cpu_seconds=time.thread_time() - cpu,
    )
