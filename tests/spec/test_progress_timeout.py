"""restartPolicy.progressTimeoutSeconds: 0 (off) or above the longest healthy gap between two
heartbeats (the slow-batch threshold plus the trigger interval, plus 30 s), refused otherwise
with the field and the smallest value named; editing the threshold above it is refused too."""

from __future__ import annotations

from typing import Any

import pytest

from eo_jobs.spec import parse_pipeline
from tests.support.pipelines import document as _doc
from tests.support.pipelines import problems as _problems

FIELD = "spec.restartPolicy.progressTimeoutSeconds"


def _with(timeout: int | None, **spec: Any) -> dict[str, Any]:
    policy = {} if timeout is None else {"progressTimeoutSeconds": timeout}
    return _doc(restartPolicy=policy, **spec)


def test_unset_it_is_none_and_the_operator_derives_it() -> None:
    assert parse_pipeline(_with(None)).spec.restart_policy.progress_timeout_seconds is None


@pytest.mark.parametrize("timeout", [0, 340, 604800])
def test_0_the_least_and_a_week_are_accepted(timeout: int) -> None:
    # The least with the defaults: 300 s slow-batch threshold + 10 s trigger + 30 s.
    assert parse_pipeline(_with(timeout)).spec.restart_policy.progress_timeout_seconds == timeout


def test_below_the_longest_healthy_gap_it_is_refused_naming_the_field_and_the_least() -> None:
    problem = _problems(_with(339))[FIELD]
    assert "at least 340, or 0 (off)" in problem
    assert "maxCheckpointDurationSeconds (300)" in problem


def test_raising_the_slow_batch_threshold_above_it_is_refused() -> None:
    doc = _with(340, alerts={"maxCheckpointDurationSeconds": 600})
    assert "at least 640" in _problems(doc)[FIELD]


def test_the_trigger_interval_counts() -> None:
    doc = _with(340, checkpoint={"location": "/c", "triggerIntervalSeconds": 60})
    assert "at least 390" in _problems(doc)[FIELD]


@pytest.mark.parametrize("timeout", [-1, 604801])
def test_out_of_range_is_refused(timeout: int) -> None:
    assert FIELD in _problems(_with(timeout))
