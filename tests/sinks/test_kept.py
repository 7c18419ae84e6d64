"""``sinks.postgres.kept``: a task's rows kept for refused records, bounded in memory."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from eo_jobs.sinks.postgres.kept import KeptBatches


def _batches(count: int, rows: int) -> list[pa.RecordBatch]:
    return [
        pa.record_batch({"id": pa.array(range(b * rows, (b + 1) * rows), pa.int64())})
        for b in range(count)
    ]


def test_batches_past_the_bound_are_read_back_from_the_file_in_the_order_kept() -> None:
    batches = _batches(10, 1_000)  # 8,000 bytes each
    kept = KeptBatches(memory_bytes=3 * 8_000)

    passed = list(kept.keeping(iter(batches)))

    assert passed == batches, "the stream goes on unchanged"
    assert kept.spilled_batches == 7
    table = kept.table()
    assert table.column("id").to_pylist() == list(range(10_000))
    kept.close()


def test_nothing_spills_under_the_bound() -> None:
    kept = KeptBatches(memory_bytes=1 << 20)
    list(kept.keeping(iter(_batches(3, 1_000))))

    assert kept.spilled_batches == 0
    assert kept.table().num_rows == 3_000


def test_the_file_has_no_name_a_kill_could_leave_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    kept = KeptBatches(memory_bytes=0)
    list(kept.keeping(iter(_batches(4, 1_000))))

    assert kept.spilled_batches == 4
    assert list(tmp_path.iterdir()) == [], "unlinked while open: a kill leaves nothing"
    assert kept.table().num_rows == 4_000
    kept.close()
