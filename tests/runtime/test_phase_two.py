"""Phase 2 in the background: one batch at a time, in order, and no failure lost."""

from __future__ import annotations

import threading

import pytest

from eo_jobs.runtime.phase_two import PhaseTwo, PhaseTwoError


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
    phase_two = PhaseTwo()

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
    phase_two = PhaseTwo()
    ran: list[int] = []

    def broken() -> None:
        raise ConnectionError("gone")

    phase_two.start(3, broken)
    with pytest.raises(PhaseTwoError):
        phase_two.start(4, lambda: ran.append(4))
    assert ran == []


def test_waiting_with_nothing_started_returns_at_once() -> None:
    PhaseTwo().wait()
