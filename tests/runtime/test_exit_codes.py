"""How a driver whose streaming query died chooses its exit code (``runtime.main.failure_exit``).

The operator relaunches on a crash (1) and leaves a fenced driver (75) alone. A zombie woken
after its checkpoint fence check but before Spark's rename fails on Spark's own "destination
already exists" (the CI run of 0d060c8 saw it): nothing was written, and it must exit as fenced.
"""

from __future__ import annotations

import pytest

from eo_jobs.protocol.errors import EXIT_FENCED, FencedError
from eo_jobs.runtime.main import failure_exit

SPARK_RENAME = (
    "[FAILED_RENAME_PATH] Failed to rename file:/cp/commits/.1.tmp to file:/cp/commits/1 as"
    " destination already exists. SQLSTATE: 42K04"
)


def test_a_query_that_fails_after_a_newer_epoch_took_the_checkpoint_exits_fenced(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = failure_exit(None, RuntimeError(SPARK_RENAME), newer_epoch=2)
    assert code == EXIT_FENCED
    err = capsys.readouterr().err
    assert "epoch 2 took over this checkpoint" in err
    assert "FAILED_RENAME_PATH" in err


def test_the_same_failure_with_no_newer_epoch_is_a_crash(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert failure_exit(None, RuntimeError(SPARK_RENAME), newer_epoch=None) == 1
    assert "streaming query failed" in capsys.readouterr().err


def test_a_refused_checkpoint_write_or_a_fenced_decision_exits_fenced() -> None:
    refused = RuntimeError("eo: checkpoint fenced: epoch 3 took over this checkpoint")
    assert failure_exit(None, refused, newer_epoch=None) == EXIT_FENCED
    decided = FencedError("test/orders", 1, 2)
    assert failure_exit(decided, RuntimeError("wrapped"), newer_epoch=None) == EXIT_FENCED
