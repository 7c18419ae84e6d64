"""Source coverage: consecutive decided batches read the source without a gap or an overlap.

Spark logs, per batch, where each source *ends* (Kafka: the next offset per topic-partition;
the file source: the last entry of its file log); a batch starts where the previous batch of
its query ended. So along a query's batch ids, the ends must never go down (that would read
records again: an overlap), a topic-partition must not drop out of the offsets (its records
after that point would belong to no batch: a gap), and no batch may be missing (its range
would be claimed by no decision). Where the checkpoint is readable, each decision must also
say what Spark's offset log says, and every file the file source logged must belong to
exactly one decided batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eo_jobs.audit.checkpoint import LocalCheckpoint, UnreadableCheckpointError
from eo_jobs.audit.evidence import LoggedDecision
from eo_jobs.audit.model import Check, Violation


def kafka_ends(offsets: Any) -> dict[tuple[str, str], int] | None:
    """``{(topic, partition): end}`` of one Kafka source's logged offsets, None if not Kafka."""
    if not isinstance(offsets, dict) or "logOffset" in offsets:
        return None
    ends: dict[tuple[str, str], int] = {}
    for topic, partitions in offsets.items():
        if not isinstance(partitions, dict):
            return None
        for partition, end in partitions.items():
            ends[(str(topic), str(partition))] = int(end)
    return ends


def log_offset(offsets: Any) -> int | None:
    """The file source's log offset (its last log entry read), None if not a file source."""
    if isinstance(offsets, dict) and "logOffset" in offsets:
        return int(offsets["logOffset"])
    return None


def kind(offsets: Any) -> str | None:
    """``kafka`` or ``files`` for the offsets of a source this audit knows, else None."""
    if log_offset(offsets) is not None:
        return "files"
    return "kafka" if kafka_ends(offsets) is not None else None


def unrecognised(decision: LoggedDecision) -> bool:
    """Whether the decision records offsets this audit cannot read (another source, or a
    shape Spark does not write)."""
    offsets = decision.source_offsets
    if offsets is None:
        return False
    if not isinstance(offsets, list):
        return True
    return any(o is not None and kind(o) is None for o in offsets)


def _sources(decision: LoggedDecision) -> list[Any]:
    offsets = decision.source_offsets
    return list(offsets) if isinstance(offsets, list) else []


def check_offsets(decisions: Sequence[LoggedDecision], position: int) -> list[Violation]:
    """Gaps and overlaps along one query's decisions (the anchor at ``position`` first).

    A batch after a missing one is compared with the last batch before the hole: its offsets
    then cover the missing batches' ranges too, which no decision claims, so that is a gap.
    """
    found: list[Violation] = []
    previous: LoggedDecision | None = None
    for decision in decisions:
        if previous is not None and decision.batch_id > position:
            found.extend(_between(previous, decision))
        previous = decision
    return found


def _between(before: LoggedDecision, after: LoggedDecision) -> list[Violation]:
    found: list[Violation] = []

    def say(text: str) -> None:
        found.append(Violation(Check.SOURCE_COVERAGE, after.batch_id, after.query_id, text))

    if after.batch_id != before.batch_id + 1:
        missing = f"{before.batch_id + 1}..{after.batch_id - 1}"
        say(
            f"gap: batches {missing} have no decision, so the source range between the end of "
            f"batch {before.batch_id} and the start of batch {after.batch_id} is claimed by none"
        )
    old, new = _sources(before), _sources(after)
    for index in range(max(len(old), len(new))):
        a = old[index] if index < len(old) else None
        b = new[index] if index < len(new) else None
        if a is None or b is None:
            if (a is None) != (b is None):
                say(f"source {index} is logged in only one of batches {before.batch_id} and "
                    f"{after.batch_id}: their ranges cannot be joined")  # fmt: skip
            continue
        ka, kb = kafka_ends(a), kafka_ends(b)
        la, lb = log_offset(a), log_offset(b)
        if kind(a) is None or kind(b) is None:
            continue  # a source this audit does not know: reported as not checked
        if ka is not None and kb is not None:
            for (topic, partition), end in sorted(ka.items()):
                if (topic, partition) not in kb:
                    say(
                        f"gap: {topic}-{partition} was read up to offset {end} by batch "
                        f"{before.batch_id} and is missing from batch {after.batch_id}'s offsets: "
                        "its records from there on belong to no batch"
                    )
                elif kb[(topic, partition)] < end:
                    say(
                        f"overlap: batch {after.batch_id} ends {topic}-{partition} at offset "
                        f"{kb[(topic, partition)]}, below offset {end} where batch "
                        f"{before.batch_id} ended it: offsets {kb[(topic, partition)]}..{end - 1} "
                        "are read again"
                    )
        elif la is not None and lb is not None:
            if lb < la:
                say(
                    f"overlap: batch {after.batch_id} ends the file log at entry {lb}, below entry "
                    f"{la} where batch {before.batch_id} ended: entries {lb + 1}..{la} are read "
                    "again"
                )
        else:
            say(f"source {index} changed kind between batches {before.batch_id} and "
                f"{after.batch_id} ({a!r} then {b!r})")  # fmt: skip
    return found


def check_against_checkpoint(
    decisions: Sequence[LoggedDecision], position: int, checkpoint: LocalCheckpoint
) -> tuple[list[Violation], list[int]]:
    """Each audited decision's offsets against Spark's offset log; (violations, batches whose
    offset file Spark already deleted: it keeps the last ``minBatchesToRetain``, 100)."""
    found: list[Violation] = []
    gone: list[int] = []
    for decision in decisions:
        if decision.batch_id <= position:
            continue
        logged = checkpoint.offsets(decision.batch_id)
        if logged is None:
            gone.append(decision.batch_id)
        elif logged != decision.source_offsets:
            found.append(
                Violation(
                    Check.SOURCE_COVERAGE,
                    decision.batch_id,
                    decision.query_id,
                    f"the decision records offsets {decision.source_offsets} but Spark's offset "
                    f"log has {logged}: the batch Spark ran is not the batch that was decided",
                )
            )
    return found, gone


def check_files(
    decisions: Sequence[LoggedDecision], position: int, checkpoint: LocalCheckpoint
) -> list[Violation]:
    """Every file in the file source's log belongs to exactly one decided batch.

    Batch N owns the log entries after the previous batch's ``logOffset`` up to its own. Files
    of entries up to the anchor's (audited before) are read too, so a file read again in this
    pass's batches is caught however long ago it was first read. Raises
    ``UnreadableCheckpointError`` when an entry is missing.
    """
    ends = [(d, log_offset(_sources(d)[0] if _sources(d) else None)) for d in decisions]
    known = [(d, end) for d, end in ends if end is not None]
    if not known:
        return []
    boundary = next((end for d, end in known if d.batch_id == position), -1)
    entries = checkpoint.source_entries(0, max(end for _, end in known))
    owner: dict[int, int] = {}
    start = boundary
    for decision, end in known:
        if decision.batch_id <= position:
            continue
        for entry in range(start + 1, end + 1):
            owner[entry] = decision.batch_id
        start = max(start, end)
    seen: dict[str, tuple[int, int | None]] = {}
    found: list[Violation] = []
    query = decisions[0].query_id
    for entry in sorted(entries):
        batch = owner.get(entry)
        for path in entries[entry]:
            if path in seen and (batch is not None or seen[path][1] is not None):
                first_entry, first_batch = seen[path]
                first = (
                    "an earlier audited batch" if first_batch is None else (f"batch {first_batch}")
                )
                found.append(
                    Violation(
                        Check.SOURCE_FILES,
                        batch if batch is not None else first_batch,
                        query,
                        f"file read twice: {path} is in file log entry {first_entry} ({first}) "
                        f"and in entry {entry} ("
                        + ("an earlier audited batch" if batch is None else f"batch {batch}")
                        + ")",
                    )
                )
            else:
                seen.setdefault(path, (entry, batch))
    return found


__all__ = [
    "UnreadableCheckpointError",
    "check_against_checkpoint",
    "check_files",
    "check_offsets",
    "kafka_ends",
    "kind",
    "log_offset",
    "unrecognised",
]
