"""Lifecycle actions of ``spec.lifecycle``: snapshots of the checkpoint, and starting over.

The driver does them, at start-up, after the fence was raised to its epoch and every in-doubt
transaction resolved (``main.start_protocol``), and after it fenced the checkpoint's writes by
that epoch (``checkpoint_fence.arm``), before its query starts. Then nothing else writes the
checkpoint or the decision log of the pipeline: the copy is consistent, the move races no one.
The driver does them rather than the operator because only the driver reaches the checkpoint
(a volume mounted in its pod, or an object store with its credentials).

One action per nonce: each is recorded in the control database (``ControlDatabase.
record_lifecycle``), and a nonce with a record is never acted on again, whatever restarts the
driver. A start-over's record is written in the transaction that deletes the old decisions, and
every step before it can be repeated, so a driver that dies half-way finishes the same
start-over at its next start, and never starts over twice.

Snapshots live in the checkpoint's own folder, ``eo-snapshots/<kind>-<nonce>``: a copy of
Spark's files with ``eo-snapshot.json`` (the decision log's position when it was taken).
``lifecycle.retention`` keeps the newest; older folders are deleted and their records marked.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from eo_jobs import logs
from eo_jobs.protocol.control_api import ControlDatabase, LifecycleRecord
from eo_jobs.protocol.errors import LifecycleRefusedError
from eo_jobs.runtime.checkpoint_store import Store
from eo_jobs.spec.models import Lifecycle, Pipeline

log = logging.getLogger("eo.lifecycle")

SNAPSHOTS = "eo-snapshots"
MANIFEST = "eo-snapshot.json"
NOT_SPARKS = frozenset({SNAPSHOTS, "eo-fence"})
"""Entries of the checkpoint folder that are eo's, not Spark's: never copied nor moved."""
SNAPSHOT = "snapshot"
START_OVER = "start-over"
SHOWN = 3
"""Files a refusal names (of how many)."""


def folder_name(kind: str, nonce: str) -> str:
    """The snapshot folder of an action: ``snapshot-<nonce>`` or ``start-over-<nonce>``."""
    return f"{kind}-{nonce}"


@dataclass(frozen=True)
class Checkpoint:
    """The checkpoint a lifecycle action works on, and the stores to reach it and the source."""

    location: str
    store: Store
    source_store: Callable[[str], Store]
    """The store of a source file's location (a files source's files may live elsewhere)."""

    def at(self, *parts: str) -> str:
        """A location under the checkpoint folder."""
        return "/".join([self.location.rstrip("/"), *parts])

    def spark_entries(self) -> list[str]:
        """The names of Spark's entries in the checkpoint folder (``metadata``, ``offsets``,
        ``commits``, ``sources``, ``state``, their ``.crc`` files)."""
        return [n for n in self.store.names(self.location) if n not in NOT_SPARKS]


def position(checkpoint: Checkpoint, control: ControlDatabase, pipeline: str) -> dict[str, Any]:
    """The decision log's position for the checkpoint as it is: its query id, that query's last
    decided batch and the epoch it was decided with, and the last batch Spark committed."""
    text = checkpoint.store.read(checkpoint.at("metadata"))
    query = str(json.loads(text.splitlines()[0])["id"]) if text else None
    commits = [int(n) for n in checkpoint.store.names(checkpoint.at("commits")) if n.isdigit()]
    decided = next((b for q, b in control.queries(pipeline) if q == query), None)
    epoch = None
    if query is not None and decided is not None:
        found = control.decision(pipeline, query, decided)
        epoch = None if found is None else found.epoch
    return {
        "queryId": query,
        "lastDecidedBatch": decided,
        "lastDecidedEpoch": epoch,
        "lastCommittedBatch": max(commits, default=None),
    }


def read_files(checkpoint: Checkpoint) -> dict[str, int]:
    """Every file the checkpoint's query read from a files source, as Spark logged it, with the
    modification time it had then (``sources/0/<entry>`` and ``<entry>.compact``: a version
    line, then one JSON object per file: path, timestamp, batchId)."""
    folder = checkpoint.at("sources", "0")
    read: dict[str, int] = {}
    for name in checkpoint.store.names(folder):
        if not name.split(".")[0].isdigit() or name.endswith(".crc"):
            continue
        text = checkpoint.store.read(f"{folder}/{name}") or ""
        for line in text.splitlines()[1:]:
            if line.strip():
                entry = json.loads(line)
                read[str(entry["path"])] = int(entry.get("timestamp") or 0)
    return read


def reread_refusal(pipeline: Pipeline, checkpoint: Checkpoint) -> str | None:
    """Why a start-over would write again what the old query wrote, or None.

    A files source: a file the old query read is still in the source's folder, unchanged (the
    modification time Spark logged for it), and the new query reads every file there. A file
    replaced under the same name since is new input. (A kafka source starting from earliest
    is refused by the spec's own rule.)
    """
    lifecycle = pipeline.spec.lifecycle
    files = pipeline.spec.source.files
    if lifecycle is None or lifecycle.start_over is None or lifecycle.start_over.allow_reread:
        return None
    if files is None:
        return None
    read = read_files(checkpoint)
    still = [
        path for path, at in read.items() if checkpoint.source_store(path).modified(path) == at
    ]
    if not still:
        return None
    shown = ", ".join(still[:SHOWN]) + (
        f" and {len(still) - SHOWN} more" if len(still) > SHOWN else ""
    )
    return (
        f"refusing to start {pipeline.key} over (lifecycle.startOver nonce "
        f"{lifecycle.start_over.nonce}): {len(still)} of the {len(read)} files the old query "
        f"already wrote to the sinks are still in source.files.path, unchanged ({shown}), and "
        "the new query would read them again and write their rows a second time. Move them "
        "out of the folder, or set lifecycle.startOver.allowReread: true to accept the "
        "duplicates; then edit the spec (a new nonce) to retry. Nothing was moved or deleted"
    )


def take_snapshot(
    pipeline: Pipeline, epoch: int, control: ControlDatabase, checkpoint: Checkpoint, nonce: str
) -> LifecycleRecord:
    """Copy Spark's files to ``eo-snapshots/snapshot-<nonce>`` with the position, and record it.

    A folder left by a driver that died before its record is copied again from scratch.
    """
    name = folder_name(SNAPSHOT, nonce)
    target = checkpoint.at(SNAPSHOTS, name)
    checkpoint.store.delete(target)
    where = position(checkpoint, control, pipeline.key)
    entries = checkpoint.spark_entries()
    for entry in entries:
        checkpoint.store.copy(checkpoint.at(entry), f"{target}/{entry}")
    detail = {**where, "kind": SNAPSHOT, "nonce": nonce, "epoch": epoch, "entries": entries}
    checkpoint.store.write(f"{target}/{MANIFEST}", json.dumps(detail, indent=2) + "\n")
    record = LifecycleRecord(pipeline.key, SNAPSHOT, nonce, name, epoch, where)
    control.record_lifecycle(record)
    return record


def start_over(
    pipeline: Pipeline, epoch: int, control: ControlDatabase, checkpoint: Checkpoint, nonce: str
) -> tuple[LifecycleRecord, int | None]:
    """Set the checkpoint aside in ``eo-snapshots/start-over-<nonce>`` and forget every query
    of the pipeline; the record and the decisions deleted (None: recorded meanwhile).

    Every step can be repeated: the manifest (with the position before anything moved) is
    written once, the move takes whatever of Spark's entries is still in place, and the
    delete of the decisions commits with the record. Refused (``LifecycleRefusedError``)
    before the first step when the new query would read again what the old one wrote.
    """
    name = folder_name(START_OVER, nonce)
    target = checkpoint.at(SNAPSHOTS, name)
    manifest = checkpoint.store.read(f"{target}/{MANIFEST}")
    if manifest is None:
        refusal = reread_refusal(pipeline, checkpoint)
        if refusal is not None:
            raise LifecycleRefusedError(refusal)
        where = position(checkpoint, control, pipeline.key)
        detail = {**where, "kind": START_OVER, "nonce": nonce, "epoch": epoch}
        checkpoint.store.write(f"{target}/{MANIFEST}", json.dumps(detail, indent=2) + "\n")
    else:
        where = {k: v for k, v in json.loads(manifest).items() if k not in ("kind", "nonce")}
        where.pop("epoch", None)
    for entry in checkpoint.spark_entries():
        moved = f"{target}/{entry}"
        checkpoint.store.delete(moved)  # a half-copied entry of an object store's rename
        checkpoint.store.move(checkpoint.at(entry), moved)
    forget = [query for query, _ in control.queries(pipeline.key)]
    record = LifecycleRecord(
        pipeline.key, START_OVER, nonce, name, epoch, {**where, "forgottenQueries": forget}
    )
    return record, control.record_lifecycle(record, forget)


def prune(
    pipeline: str, lifecycle: Lifecycle, control: ControlDatabase, checkpoint: Checkpoint
) -> list[str]:
    """Delete the snapshot folders beyond ``lifecycle.retention`` (the oldest); their names."""
    kept = [r for r in control.lifecycle_records(pipeline) if r.pruned_at is None]
    gone = kept[: max(0, len(kept) - lifecycle.retention)]
    for record in gone:
        checkpoint.store.delete(checkpoint.at(SNAPSHOTS, record.name))
        control.prune_lifecycle(pipeline, record.kind, record.nonce)
    return [record.name for record in gone]


NOT_DIGESTED = frozenset({"lifecycle", "suspend", "alerts", "restart_policy", "audit"})
"""Spec fields an automatic snapshot's digest leaves out: the lifecycle itself (a nonce edit is
no new spec to guard against) and what only the operator reads."""


def spec_digest(pipeline: Pipeline, image: str) -> str:
    """12 hex characters naming what this driver runs: the spec fields it reads, defaults left
    out (as the operator's spec hash), and its job image."""
    spec = pipeline.spec.model_dump(
        mode="json", by_alias=True, exclude_defaults=True, exclude=set(NOT_DIGESTED)
    )
    text = json.dumps({"spec": spec, "image": image}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def run(
    pipeline: Pipeline,
    epoch: int,
    control: ControlDatabase,
    checkpoint: Checkpoint,
    image: str = "",
) -> Sequence[str]:
    """Do what ``spec.lifecycle`` asks that is not recorded yet: the snapshots first (of the
    checkpoint as it is: the one a nonce asks for, the automatic one of a spec or ``image``
    not snapshotted yet), then the start-over; then retention (also when nothing was done: a
    lowered ``retention`` applies at the next start). Returns what was done, for
    the log. Raises ``LifecycleRefusedError`` for a start-over that would duplicate."""
    lifecycle = pipeline.spec.lifecycle
    if lifecycle is None:
        return []
    done_before = {(r.kind, r.nonce) for r in control.lifecycle_records(pipeline.key)}
    done: list[str] = []
    nonces = [] if lifecycle.snapshot is None else [lifecycle.snapshot.nonce]
    if lifecycle.snapshot_on_spec_change:
        nonces.append(f"auto-{spec_digest(pipeline, image)}")
    for nonce in nonces:
        if (SNAPSHOT, nonce) in done_before:
            continue
        record = take_snapshot(pipeline, epoch, control, checkpoint, nonce)
        logs.event("snapshot", nonce=nonce, folder=record.name, **record.detail)
        done.append(f"snapshot {record.name}")
    again = lifecycle.start_over
    if again is not None and (START_OVER, again.nonce) not in done_before:
        record, deleted = start_over(pipeline, epoch, control, checkpoint, again.nonce)
        logs.event(
            "started-over",
            nonce=again.nonce,
            folder=record.name,
            forgotten_queries=list(record.detail.get("forgottenQueries", [])),
            forgotten_decisions=deleted,
        )
        done.append(f"start-over {record.name}")
    for name in prune(pipeline.key, lifecycle, control, checkpoint):
        log.info("snapshot %s deleted (lifecycle.retention %d)", name, lifecycle.retention)
    return done
