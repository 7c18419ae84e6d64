"""Status is merge-patched: a null deletes its key at any level. A failure with no exit code
(hung, never started, node lost) must remove the exit code of the failure before it, and a
status equal to the stored one once patched must not be written again on the next pass."""

from __future__ import annotations

from dataclasses import replace

from eo_operator.planner import Failure, plan
from eo_operator.reconciler import _unchanged, merge_patched
from eo_operator.status import memory_from_status, status_from
from tests.operator.test_planner import NOW, _obs
from tests.operator.test_planner_history import RNG


def test_merge_patch_merges_objects_and_a_null_removes_its_key_at_any_level() -> None:
    current = {"a": 1, "f": {"pod": "p1", "exitCode": 1}, "l": [1, 2]}
    patch = {"a": None, "f": {"pod": "p2", "exitCode": None}, "l": [3]}
    assert merge_patched(current, patch) == {"f": {"pod": "p2"}, "l": [3]}


def test_a_hung_failure_after_one_with_an_exit_code_drops_it_and_is_then_unchanged() -> None:
    obs = _obs()
    crashed = Failure("orders-driver-e1", "Error", 1, "exit 1", NOW)
    hung = Failure("orders-driver-e2", "DriverHung", None, "no progress for 700 s", NOW)
    before = status_from(replace(plan(obs, RNG).memory, failure=crashed), obs, {})
    stored = merge_patched({}, before)
    assert stored["lastFailure"]["exitCode"] == 1

    patch = status_from(replace(plan(obs, RNG).memory, failure=hung), obs, stored)
    assert not _unchanged({"status": stored}, patch)
    stored = merge_patched(stored, patch)
    assert "exitCode" not in stored["lastFailure"], stored["lastFailure"]
    assert memory_from_status(stored).failure == hung
    # The next pass plans the same status: nothing to write.
    again = status_from(replace(plan(obs, RNG).memory, failure=hung), obs, stored)
    assert _unchanged({"status": stored}, again)
