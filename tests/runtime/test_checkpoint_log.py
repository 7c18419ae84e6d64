"""The checkpoint names a batch's files by the source offsets Spark logged for it.

Spark's file source numbers its own log (``sources/0/K``) and logs an entry as soon as it finds
new files, before the query writes ``offsets/N``. A driver killed between the two writes leaves
an entry no query batch ever got, and from then on query batch N reads source entries
``offsets(N-1).logOffset + 1 .. offsets(N).logOffset``, not entry N. These write the checkpoint
files in Spark's own format (no Spark needed) for a log that diverged that way.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from eo_jobs.runtime.checkpoint import CheckpointLog, UnreadableCheckpointError, _read_local


def _offsets(checkpoint: Path, batch_id: int, log_offset: int) -> None:
    folder = checkpoint / "offsets"
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}
    text = f"v1\n{json.dumps(meta)}\n{json.dumps({'logOffset': log_offset})}"
    (folder / str(batch_id)).write_text(text)


def _source_log(checkpoint: Path, name: str, entries: list[tuple[str, int]]) -> None:
    folder = checkpoint / "sources" / "0"
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"path": path, "timestamp": 0, "batchId": log_id}) for path, log_id in entries
    ]
    (folder / name).write_text("\n".join(["v1", *lines]))


def test_a_batch_after_an_orphan_source_entry_reads_every_entry_its_offsets_cover(
    tmp_path: Path,
) -> None:
    # Batch 0 read a; Spark then logged entry 1 (b) and was killed before offsets/1. The next
    # driver found c, logged entry 2, and batch 1 covers entries 1 and 2.
    _offsets(tmp_path, 0, 0)
    _offsets(tmp_path, 1, 2)
    _offsets(tmp_path, 2, 3)
    _source_log(tmp_path, "0", [("file:/in/a.json", 0)])
    _source_log(tmp_path, "1", [("file:/in/b.json", 1)])
    _source_log(tmp_path, "2", [("file:/in/c.json", 2)])
    _source_log(tmp_path, "3", [("file:/in/d.json", 3)])
    log = CheckpointLog(str(tmp_path), _read_local)
    assert log.source_files(0) == ["file:/in/a.json"]
    assert log.source_files(1) == ["file:/in/b.json", "file:/in/c.json"]
    assert log.source_files(2) == ["file:/in/d.json"]


def test_entries_folded_into_a_compacted_log_are_found_by_their_log_offset(
    tmp_path: Path,
) -> None:
    # The source log is compacted at entry 9 (9.compact holds entries 0..9); query batch 8
    # covers entries 8 and 9 after a divergence at entry 8.
    entries = [(f"file:/in/f{i}.json", i) for i in range(10)]
    _source_log(tmp_path, "8", entries[8:9])
    _source_log(tmp_path, "9.compact", entries)
    _offsets(tmp_path, 7, 7)
    _offsets(tmp_path, 8, 9)
    log = CheckpointLog(str(tmp_path), _read_local)
    assert log.source_files(8) == ["file:/in/f8.json", "file:/in/f9.json"]


def test_a_batch_whose_offsets_are_not_logged_is_refused_not_guessed(tmp_path: Path) -> None:
    _source_log(tmp_path, "0", [("file:/in/a.json", 0)])
    with pytest.raises(UnreadableCheckpointError, match="offsets"):
        CheckpointLog(str(tmp_path), _read_local).source_files(0)
