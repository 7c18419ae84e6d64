"""Phase 2 in the background: one batch at a time, in order, and no failure lost."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from eo_jobs.runtime.phase_two import (
    DEFAULT_RETRY_SECONDS,
    RETRY_ENV,
    PhaseTwo,
    PhaseTwoError,
)


def test_the_next_batch_waits_for_the_previous_phase_2_to_end() -> None:
    phase_two = PhaseTwo()
    release = threading.Event()
    order: list[str] = []

    def first() -> None:
        release.wait(10)
        order.append("commit 1")

    phase_two.start(1, first)
    threading.Timer(0.2, release.set).start()
    phase_two.start(2, lambda: order.append("commit 2"))
    phase_two.wait()
    assert order == ["commit 1", "commit 2"]


def test_a_failed_phase_2_is_raised_by_the_next_wait_naming_its_batch_and_only_once() -> None:
    phase_two = PhaseTwo(retry_seconds=0)

    def broken() -> None:
        raise ConnectionError("server closed the connection")

    phase_two.start(7, broken)
    with pytest.raises(PhaseTwoError) as raised:
        phase_two.wait()
    assert raised.value.batch_id == 7
    assert isinstance(raised.value.__cause__, ConnectionError)
    assert "batch 7" in str(raised.value) and "recovery" in str(raised.value)
    phase_two.wait()  # raised once: the failure was handed over


def test_a_failed_phase_2_stops_the_next_batch_from_starting_its_own() -> None:
    phase_two = PhaseTwo(retry_seconds=0)
    ran: list[int] = []

    def broken() -> None:
        raise ConnectionError("gone")

    phase_two.start(3, broken)
    with pytest.raises(PhaseTwoError):
        phase_two.start(4, lambda: ran.append(4))
    assert ran == []


def test_waiting_with_nothing_started_returns_at_once() -> None:
    PhaseTwo().wait()


def test_a_failing_phase_2_is_retried_until_it_succeeds_and_each_failure_is_logged_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    phase_two = PhaseTwo(retry_seconds=60)
    calls: list[float] = []
    gave_up: list[PhaseTwoError] = []
    phase_two.on_give_up = gave_up.append

    def flaky() -> None:
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise ConnectionError("sink down")

    with caplog.at_level(logging.WARNING, logger="eo.phase2"):
        phase_two.start(5, flaky)
        phase_two.wait()  # no failure: the third attempt committed
    assert len(calls) == 3 and gave_up == []
    assert calls[2] - calls[1] > calls[1] - calls[0] > 0.4  # backoff
    failures = [r for r in caplog.records if getattr(r, "attempt", None) is not None]
    assert [(r.levelno, r.batch, r.attempt) for r in failures] == [  # type: ignore[attr-defined]
        (logging.WARNING, 5, 1),
        (logging.WARNING, 5, 2),
    ]
    assert "sink down" in failures[0].getMessage()


def test_a_phase_2_failing_past_its_bound_gives_up_once_and_its_wait_raises_the_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    phase_two = PhaseTwo(retry_seconds=1.2)
    gave_up = threading.Event()
    failures: list[PhaseTwoError] = []

    def give_up(failure: PhaseTwoError) -> None:
        failures.append(failure)
        gave_up.set()

    phase_two.on_give_up = give_up

    def broken() -> None:
        raise ConnectionError("still down")

    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="eo.phase2"):
        phase_two.start(9, broken)
        assert gave_up.wait(10)  # without anyone waiting: an idle stream's driver is told
    assert 1.2 <= time.monotonic() - started < 5
    [failure] = failures
    assert failure.batch_id == 9 and failure.attempts >= 3
    assert isinstance(failure.__cause__, ConnectionError)
    assert caplog.records[-1].levelno == logging.ERROR
    with pytest.raises(PhaseTwoError) as raised:
        phase_two.wait()
    assert raised.value is failure


def test_the_retry_bound_comes_from_the_environment_with_a_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(RETRY_ENV, raising=False)
    assert PhaseTwo().retry_seconds == DEFAULT_RETRY_SECONDS
    monkeypatch.setenv(RETRY_ENV, "4.5")
    assert PhaseTwo().retry_seconds == 4.5
    monkeypatch.setenv(RETRY_ENV, "soon")
    with pytest.raises(ValueError, match=RETRY_ENV):
        PhaseTwo()
