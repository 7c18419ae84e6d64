"""What ``eo demo`` shows of a driver's output: one line per event, errors without Java frames."""

from __future__ import annotations

import json

from eo_jobs.runtime.demo import driver_line


def _event(**fields: object) -> str:
    return json.dumps(fields) + "\n"


def test_a_finished_batch_is_one_line_and_counts_as_a_batch() -> None:
    line = _event(event="batch", batch=3, rows=20000, prepare_ms=512.4, decide_ms=2.6, commit_ms=4)
    assert driver_line(line, 2) == (
        "  epoch 2 | batch   3:  20000 rows (prepare 512 ms, decide 3 ms, commit 4 ms)",
        True,
    )


def test_replays_recoveries_and_a_failed_first_pass_are_shown_but_are_not_batches() -> None:
    replay = _event(event="replay", batch=2, decided_by_epoch=1, rows=5)
    reread = _event(event="reread", batch=4, files=4, first_read="failed", rolled_back=1)
    recovered = _event(event="recovered", committed=["a", "b"], rolled_back=[])
    assert driver_line(replay, 2) == (
        "  epoch 2 | batch   2: already decided by epoch 1, replay writes nothing",
        False,
    )
    assert driver_line(reread, 2) == (
        "  epoch 2 | batch   4: a malformed record stopped the first pass; 1 prepared rolled "
        "back, its 4 files read again with the record set aside",
        False,
    )
    assert driver_line(recovered, 3) == (
        "  epoch 3 | startup recovery: 2 committed, 0 rolled back",
        False,
    )


def test_quiet_events_and_the_frames_of_java_stack_traces_are_not_shown() -> None:
    skipped = _event(event="reread", batch=5, files=4, first_read="skipped", rolled_back=0)
    frame = (
        "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.cannotReadFilesError(X.scala:9)\n"
    )
    assert driver_line(skipped, 1) == (None, False)
    assert driver_line(_event(event="progress", batch=1), 1) == (None, False)
    assert driver_line(frame, 1) == (None, False)
    assert driver_line("26/11/26 19:28:15 WARN Utils: noise\n", 1) == (None, False)
    error = "py4j.Py4JNetworkException: Error while sending a command\n"
    assert driver_line(error, 1) == (f"  epoch 1 | {error.rstrip()}", False)
