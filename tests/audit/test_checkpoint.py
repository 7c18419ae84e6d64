"""The file source's coverage against a checkpoint in Spark's format (metadata, offsets/N,
sources/0/K and compacted entries), with decisions made by the real protocol."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eo_jobs.audit import Check, Status, audit
from eo_jobs.audit.checkpoint import LocalCheckpoint, UnreadableCheckpointError
from tests.audit import harness as h
from tests.protocol import harness as ph

ENTRIES = {0: ["file:/in/a.json", "file:/in/b.json"], 1: ["file:/in/c.json"],
           2: ["file:/in/d.json"], 3: ["file:/in/e.json"]}  # fmt: skip


def _pipeline(dsn: str, folder: Path) -> None:
    h.drive(dsn, range(4), h.files)
    h.write_checkpoint(folder, ph.QUERY, ENTRIES)


def _append(folder: Path, entry: int, path: str) -> None:
    log = folder / "sources" / "0" / str(entry)
    item = {"path": path, "size": 1, "isDir": False, "modificationTime": 0,
            "blockReplication": 1, "blockSize": 1, "action": "add", "batchId": entry}  # fmt: skip
    log.write_text(log.read_text() + json.dumps(item) + "\n")


def test_every_logged_file_in_one_batch_passes(pg_dsn: str, tmp_path: Path) -> None:
    _pipeline(pg_dsn, tmp_path)
    result = audit(h.target(pg_dsn, checkpoint=str(tmp_path)))
    assert result.ok, result.violations
    ran = {(c.check, c.subject): c.status for c in result.checks}
    assert ran[(Check.SOURCE_FILES, "checkpoint")] is Status.RAN
    assert ran[(Check.SOURCE_COVERAGE, "checkpoint offsets")] is Status.RAN


def test_a_file_read_twice_is_named_with_both_batches(pg_dsn: str, tmp_path: Path) -> None:
    _pipeline(pg_dsn, tmp_path)
    _append(tmp_path, 3, "file:/in/c.json")
    result = audit(h.target(pg_dsn, checkpoint=str(tmp_path)))
    assert [(v.check, v.batch) for v in result.violations] == [(Check.SOURCE_FILES, 3)]
    assert "file:/in/c.json" in result.violations[0].evidence
    assert "batch 1" in result.violations[0].evidence


def test_a_file_read_again_long_after_an_audited_batch_is_named(
    pg_dsn: str, tmp_path: Path
) -> None:
    _pipeline(pg_dsn, tmp_path)
    first = audit(h.target(pg_dsn, checkpoint=str(tmp_path)), max_batches=2)
    assert first.ok and first.end.batches == {h.harness_token(): 1}
    _append(tmp_path, 3, "file:/in/a.json")
    later = audit(h.target(pg_dsn, checkpoint=str(tmp_path)), first.end)
    assert [(v.check, v.batch) for v in later.violations] == [(Check.SOURCE_FILES, 3)]
    assert "earlier audited batch" in later.violations[0].evidence


def test_a_decision_that_disagrees_with_sparks_offset_log_is_named(
    pg_dsn: str, tmp_path: Path
) -> None:
    _pipeline(pg_dsn, tmp_path)
    h.sql(pg_dsn, """UPDATE eo.decisions SET source_offsets = '[{"logOffset": 7}]'
                     WHERE batch_id = 2""")  # fmt: skip
    result = audit(h.target(pg_dsn, checkpoint=str(tmp_path)))
    named = {(v.check, v.batch) for v in result.violations}
    assert (Check.SOURCE_COVERAGE, 2) in named  # the decision is not what Spark logged
    assert (Check.SOURCE_COVERAGE, 3) in named  # and batch 3 now ends below batch 2: overlap


def test_compacted_entries_are_read_and_a_missing_entry_is_not_a_pass(
    pg_dsn: str, tmp_path: Path
) -> None:
    _pipeline(pg_dsn, tmp_path)
    folder = tmp_path / "sources" / "0"
    compact = ["v1"] + [
        json.dumps({"path": p, "batchId": k, "action": "add"})
        for k in (0, 1, 2)
        for p in ENTRIES[k]
    ]
    (folder / "2.compact").write_text("\n".join(compact) + "\n")
    for k in (0, 1, 2):
        (folder / str(k)).unlink()
    reader = LocalCheckpoint(tmp_path)
    assert reader.source_entries(0, 3) == ENTRIES
    assert audit(h.target(pg_dsn, checkpoint=str(tmp_path))).ok
    (folder / "3").unlink()
    with pytest.raises(UnreadableCheckpointError):
        reader.source_entries(0, 3)
    result = audit(h.target(pg_dsn, checkpoint=str(tmp_path)))
    files = next(c for c in result.checks if c.check is Check.SOURCE_FILES)
    assert files.status is Status.NOT_RUN and "entry 3" in files.detail


def test_a_checkpoint_in_an_object_store_is_reported_as_not_read(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(2), h.files)
    result = audit(h.target(pg_dsn, checkpoint="s3a://bucket/ckpt"))
    files = next(c for c in result.checks if c.check is Check.SOURCE_FILES)
    assert files.status is Status.NOT_RUN and "s3a://bucket/ckpt" in files.detail
