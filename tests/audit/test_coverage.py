"""Source coverage on decision rows alone: the shapes Spark logs, and what breaks them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from eo_jobs.audit import coverage
from eo_jobs.audit.evidence import LoggedDecision

Q = "3f2b0c9e-8d1a-4c6b-9e2f-0a1b2c3d4e5f"


def _d(batch: int, offsets: Any) -> LoggedDecision:
    return LoggedDecision(Q, batch, 1, (), offsets, 0, datetime.now(UTC))


def _k(p0: int, p1: int) -> list[Any]:
    return [{"t": {"0": p0, "1": p1}}]


def test_contiguous_kafka_batches_pass() -> None:
    log = [_d(0, _k(10, 10)), _d(1, _k(20, 10)), _d(2, _k(20, 30))]
    assert coverage.check_offsets(log, -1) == []


def test_a_missing_batch_is_a_gap_at_the_batch_after_it() -> None:
    found = coverage.check_offsets([_d(0, _k(10, 10)), _d(2, _k(30, 30))], -1)
    assert [(v.batch, v.evidence.split(":")[0]) for v in found] == [(2, "gap")]
    assert "batches 1..1 have no decision" in found[0].evidence


def test_an_end_going_down_is_an_overlap_naming_the_offsets_read_again() -> None:
    found = coverage.check_offsets([_d(4, _k(50, 50)), _d(5, _k(45, 60))], 4)
    assert [v.batch for v in found] == [5]
    assert "t-0" in found[0].evidence and "45..49" in found[0].evidence


def test_a_partition_dropping_out_is_a_gap() -> None:
    found = coverage.check_offsets([_d(0, _k(10, 10)), _d(1, [{"t": {"0": 20}}])], -1)
    assert [v.batch for v in found] == [1] and "t-1" in found[0].evidence


def test_the_anchor_is_compared_but_not_audited_again() -> None:
    # Batch 3 (the position) went down against batch 2: audited before, not reported again.
    log = [_d(3, _k(5, 5)), _d(4, _k(6, 6))]
    assert coverage.check_offsets(log, 3) == []


def test_the_file_log_offset_going_down_is_an_overlap() -> None:
    found = coverage.check_offsets([_d(0, [{"logOffset": 3}]), _d(1, [{"logOffset": 2}])], -1)
    assert [v.batch for v in found] == [1] and "entries 3..3" in found[0].evidence


def test_a_source_changing_kind_is_named_and_an_unknown_one_is_unrecognised() -> None:
    found = coverage.check_offsets([_d(0, [{"logOffset": 3}]), _d(1, _k(1, 1))], -1)
    assert [v.batch for v in found] == [1] and "changed kind" in found[0].evidence
    odd = _d(0, {"start": 0, "end": 60})
    assert coverage.unrecognised(odd) and not coverage.unrecognised(_d(0, _k(1, 1)))
    assert coverage.check_offsets([odd, _d(1, {"start": 60, "end": 120})], -1) == []
