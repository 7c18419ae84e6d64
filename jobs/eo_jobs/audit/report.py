"""The reconciliation report: a time window's batches, chained so a saved copy can be checked.

For each batch decided in ``[from, to)`` the report lists what the decision log says (query,
batch, epoch, participants, source offsets and the range they close, rows written) and the
dead letters the batch set aside, plus the recoveries (``eo.failures``) and the epochs that
decided the batches. Each batch's record is hashed, as canonical JSON, together with the hash
of the batch before it (SHA-256), so changing, adding or removing any batch changes every hash
after it. ``verify`` re-reads the database for the saved report's window and names the first
batch whose record no longer matches, or the first whose hash the file itself got wrong (the
file was edited).

Rows per sink come from the markers, which are pruned after a day and 1,000 batches: they are
shown, never hashed, so a report stays verifiable after its markers are gone.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import sql

from eo_jobs.audit.coverage import kafka_ends, log_offset
from eo_jobs.audit.evidence import reading, table_identifier
from eo_jobs.protocol.gid import Gid, sink_token
from eo_jobs.spec.models import DEAD_LETTER_SINK

VERSION = "eo-report-v1"
HASHED = (
    "query_id",
    "batch",
    "epoch",
    "decided_at",
    "participants",
    "source_offsets",
    "source_ranges",
    "rows_written",
    "dead_letters",
)
"""The fields of a batch that its hash covers (the rest is shown, not proven)."""


class NoDecisionLogError(LookupError):
    """The control database has no decision log to report on."""


@dataclass(frozen=True)
class ReportSources:
    """Where the report reads: the control database, each sink's database (for rows per sink
    from the markers) and the dead-letter table (database, ``schema.table``)."""

    pipeline: str
    control_dsn: str
    sink_dsns: Mapping[str, str]
    dead_letters: tuple[str, str] | None = None


def canonical(record: Mapping[str, Any]) -> str:
    """The one JSON text of a batch's hashed fields (sorted keys, no spaces, UTF-8 as is)."""
    return json.dumps(
        {k: record.get(k) for k in HASHED},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )


def genesis(pipeline: str, start: str, end: str) -> str:
    """The hash before the first batch: binds the chain to the pipeline and the window."""
    return hashlib.sha256(f"{VERSION}\n{pipeline}\n{start}\n{end}".encode()).hexdigest()


def chain(previous: str, record: Mapping[str, Any]) -> str:
    """The hash of a batch: SHA-256 of the previous hash, a newline and its canonical JSON."""
    return hashlib.sha256(f"{previous}\n{canonical(record)}".encode()).hexdigest()


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def parse_time(text: str) -> datetime:
    """An ISO 8601 time; one without a zone is taken as UTC."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _ranges(before: Any, after: Any) -> list[Any]:
    """Per source, the range a batch read: Kafka ``{topic-partition: [start, end)}`` or the file
    log entries ``[first, last]``; None where the start is unknown (the first batch)."""
    out: list[Any] = []
    old = before if isinstance(before, list) else []
    new = after if isinstance(after, list) else []
    for index, end in enumerate(new):
        start = old[index] if index < len(old) else None
        kb, lb = kafka_ends(end), log_offset(end)
        if kb is not None:
            ka = kafka_ends(start) or {}
            out.append({f"{t}-{p}": [ka.get((t, p)), e] for (t, p), e in sorted(kb.items())})
        elif lb is not None:
            la = log_offset(start)
            out.append({"file_log_entries": [None if la is None else la + 1, lb]})
        else:
            out.append(None)
    return out


def build(sources: ReportSources, start: datetime, end: datetime) -> dict[str, Any]:
    """The report of the batches decided in ``[start, end)`` (bounded by the database's now:
    batches decided after the report was taken must not change it)."""
    with reading(sources.control_dsn) as conn:
        now = conn.execute("SELECT clock_timestamp()").fetchone()
        assert now is not None
        as_of: datetime = now[0]
        found_log = conn.execute("SELECT to_regclass('eo.decisions') IS NOT NULL").fetchone()
        if not found_log or not found_log[0]:
            raise NoDecisionLogError(
                f"the control database of {sources.pipeline} has no eo.decisions: the pipeline "
                "never decided a batch there (is it the pipeline's spec.control, or its first "
                "sink's database?)"
            )
        upper = min(end, as_of)
        rows = conn.execute(
            """SELECT query_id, batch_id, epoch, participants, source_offsets, rows_written,
                      decided_at
               FROM eo.decisions WHERE pipeline = %s AND decided_at >= %s AND decided_at < %s
               ORDER BY decided_at, query_id, batch_id""",
            (sources.pipeline, start, upper),
        ).fetchall()
        previous: dict[tuple[str, int], Any] = {}
        for query_id, batch_id, *_ in rows:
            if (query_id, batch_id - 1) not in previous:
                found = conn.execute(
                    "SELECT source_offsets FROM eo.decisions WHERE pipeline = %s AND "
                    "query_id = %s AND batch_id = %s",
                    (sources.pipeline, query_id, batch_id - 1),
                ).fetchone()
                previous[(query_id, batch_id - 1)] = None if found is None else found[0]
        failures = conn.execute(
            """SELECT failed_at, query_id, batch_id, epoch, reason FROM eo.failures
               WHERE pipeline = %s AND failed_at >= %s AND failed_at < %s ORDER BY failed_at""",
            (sources.pipeline, start, upper),
        ).fetchall()
    offsets_of = {(q, b): o for q, b, _, _, o, _, _ in rows}
    dead = _dead_letters(sources, [int(r[1]) for r in rows])
    by_sink = _rows_by_sink(sources, [g for r in rows for g in r[3]])
    names = {sink_token(n): n for n in (*sources.sink_dsns, DEAD_LETTER_SINK)}
    batches: list[dict[str, Any]] = []
    head = genesis(sources.pipeline, _iso(start), _iso(end))
    for query_id, batch_id, epoch, participants, offsets, written, decided_at in rows:
        before = offsets_of.get((query_id, batch_id - 1), previous.get((query_id, batch_id - 1)))
        record: dict[str, Any] = {
            "query_id": query_id,
            "batch": int(batch_id),
            "epoch": int(epoch),
            "decided_at": _iso(decided_at),
            "participants": sorted(participants),
            "source_offsets": offsets,
            "source_ranges": _ranges(before, offsets),
            "rows_written": int(written),
            "dead_letters": dead.get(int(batch_id), 0) if dead is not None else None,
        }
        record["rows_by_sink"] = _sum_by_sink(participants, by_sink, names)
        head = chain(head, record)
        record["hash"] = head
        batches.append(record)
    return {
        "version": VERSION,
        "pipeline": sources.pipeline,
        "from": _iso(start),
        "to": _iso(end),
        "as_of": _iso(as_of),
        "batches": batches,
        "totals": _totals(batches),
        "epochs": _epochs(batches),
        "recoveries": [
            {"failed_at": _iso(t), "query_id": q, "batch": b, "epoch": e, "reason": r}
            for t, q, b, e, r in failures
        ],
        "chain": {"algorithm": "sha256", "head": head, "hashed_fields": list(HASHED)},
    }


def _dead_letters(sources: ReportSources, batches: Sequence[int]) -> dict[int, int] | None:
    """Dead letters per batch id (the table has no query id: batch ids of a query that started
    over share counts); None when the table cannot be read."""
    if sources.dead_letters is None or not batches:
        return {} if sources.dead_letters is not None else None
    dsn, table = sources.dead_letters
    try:
        with reading(dsn) as conn:
            exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
            if not exists or not exists[0]:
                return {}
            found = conn.execute(
                sql.SQL(
                    "SELECT batch_id, count(*) FROM {} WHERE pipeline = %s "
                    "AND batch_id BETWEEN %s AND %s GROUP BY batch_id"
                ).format(table_identifier(table)),
                (sources.pipeline, min(batches), max(batches)),
            ).fetchall()
    except psycopg.Error:
        return None
    return {int(b): int(n) for b, n in found}


def _rows_by_sink(sources: ReportSources, gids: Sequence[str]) -> dict[str, int | None]:
    """Rows each participant committed, from its marker (None once pruned or unreadable)."""
    by_token: dict[str, list[str]] = {}
    for gid in gids:
        parsed = Gid.parse(gid)
        if parsed is not None:
            by_token.setdefault(parsed.sink, []).append(gid)
    rows: dict[str, int | None] = dict.fromkeys(gids)
    for name, dsn in sources.sink_dsns.items():
        wanted = by_token.get(sink_token(name), [])
        if not wanted:
            continue
        try:
            with reading(dsn) as conn:
                for gid, count in conn.execute(
                    "SELECT gid, rows_written FROM eo.markers WHERE gid = ANY(%s)", (wanted,)
                ):
                    rows[gid] = int(count)
        except psycopg.Error:
            continue
    return rows


def _sum_by_sink(
    participants: Sequence[str], rows: Mapping[str, int | None], names: Mapping[str, str]
) -> dict[str, Any]:
    """Rows per sink name (a sink the report was not given keeps its gid token)."""
    out: dict[str, Any] = {}
    for gid in participants:
        parsed = Gid.parse(gid)
        name = names.get(parsed.sink, parsed.sink) if parsed else gid
        count = rows.get(gid)
        if name in out and out[name] is None:
            continue
        out[name] = None if count is None else (out.get(name) or 0) + count
    return out


def _totals(batches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    dead = [b["dead_letters"] for b in batches if b["dead_letters"] is not None]
    return {
        "batches": len(batches),
        "rows_written": sum(int(b["rows_written"]) for b in batches),
        "dead_letters": sum(dead) if dead else None,
    }


def _epochs(batches: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each epoch that decided batches in the window, with its first and last batch."""
    out: dict[int, dict[str, Any]] = {}
    for b in batches:
        entry = out.setdefault(
            b["epoch"], {"epoch": b["epoch"], "first_batch": b["batch"], "batches": 0}
        )
        entry["last_batch"] = b["batch"]
        entry["batches"] += 1
    return [out[e] for e in sorted(out)]


@dataclass(frozen=True)
class Verification:
    """Whether a saved report still matches the database, and the first batch that does not."""

    ok: bool
    batch: int | None
    query_id: str | None
    message: str

    def as_json(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "ok": self.ok,
            "batch": self.batch,
            "query_id": self.query_id,
            "message": self.message,
        }


def verify(saved: Mapping[str, Any], sources: ReportSources) -> Verification:
    """Check the saved report's own chain, then re-read its window and compare batch by batch.

    The re-read is bounded by the saved ``as_of``, so batches decided after the report was
    taken do not count as differences.
    """
    if saved.get("version") != VERSION:
        return Verification(False, None, None, f"not an {VERSION} report")
    head = genesis(str(saved["pipeline"]), str(saved["from"]), str(saved["to"]))
    for record in saved["batches"]:
        head = chain(head, record)
        if record.get("hash") != head:
            return Verification(
                False,
                record.get("batch"),
                record.get("query_id"),
                f"the report file itself was altered at batch {record.get('batch')}: its hash "
                "does not follow from its content and the batches before it",
            )
    end = min(parse_time(str(saved["to"])), parse_time(str(saved["as_of"])))
    fresh = build(sources, parse_time(str(saved["from"])), end)
    old, new = list(saved["batches"]), fresh["batches"]
    for index in range(max(len(old), len(new))):
        a = old[index] if index < len(old) else None
        b = new[index] if index < len(new) else None
        if a is not None and b is not None and canonical(a) == canonical(b):
            continue
        return _difference(a, b)
    return Verification(
        True, None, None, f"{len(old)} batches match the database (chain head {head[:16]}...)"
    )


def _difference(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> Verification:
    """Describe the first batch where the saved report and the database part ways."""
    if a is None:
        assert b is not None
        return Verification(
            False,
            b["batch"],
            b["query_id"],
            f"the database holds batch {b['batch']} in the window, which the report does not",
        )
    if b is None or (a["query_id"], a["batch"]) != (b["query_id"], b["batch"]):
        return Verification(
            False,
            a["batch"],
            a["query_id"],
            f"batch {a['batch']} of the report is no longer in the database's window "
            f"(the database has {'nothing' if b is None else 'batch ' + str(b['batch'])} there)",
        )
    fields = [k for k in HASHED if a.get(k) != b.get(k)]
    shown = "; ".join(f"{k}: report {a.get(k)!r}, database {b.get(k)!r}" for k in fields)
    return Verification(
        False, a["batch"], a["query_id"], f"batch {a['batch']} differs from the database: {shown}"
    )


def render(report: Mapping[str, Any]) -> str:
    """The report as text for a person (``eo report`` without ``--json``)."""
    lines = [
        f"reconciliation report of {report['pipeline']}",
        f"window {report['from']} .. {report['to']} (as of {report['as_of']})",
        "",
        "batch  epoch  decided at                        rows  dead  source read",
    ]
    for b in report["batches"]:
        ranges = "; ".join(json.dumps(r, separators=(",", ":")) for r in b["source_ranges"])
        dead = "-" if b["dead_letters"] is None else str(b["dead_letters"])
        lines.append(
            f"{b['batch']:>5}  {b['epoch']:>5}  {b['decided_at']:<32}  {b['rows_written']:>6}  "
            f"{dead:>4}  {ranges}"
        )
        sinks = ", ".join(
            f"{k}={'pruned' if v is None else v}" for k, v in sorted(b["rows_by_sink"].items())
        )
        if sinks:
            lines.append(f"{'':>14}rows by sink: {sinks}")
    totals = report["totals"]
    lines += [
        "",
        f"{totals['batches']} batches, {totals['rows_written']} rows written, "
        f"{'unknown' if totals['dead_letters'] is None else totals['dead_letters']} dead letters",
        "epochs: "
        + (
            ", ".join(
                f"{e['epoch']} (batches {e['first_batch']}..{e['last_batch']})"
                for e in report["epochs"]
            )
            or "none"
        ),
        f"recoveries and failed attempts: {len(report['recoveries'])}",
    ]
    lines += [
        f"  {r['failed_at']} epoch {r['epoch']} batch {r['batch']}: {r['reason'][:200]}"
        for r in report["recoveries"]
    ]
    lines.append(f"hash chain (sha256) head: {report['chain']['head']}")
    return "\n".join(lines) + "\n"
