"""Fault injection at the protocol's crash points, for tests and ``eo demo``.

Setting ``EO_FAULT_POINT`` to one of ``POINTS`` makes the process kill itself with SIGKILL when
it reaches that point (optionally only for batch ``EO_FAULT_BATCH``). SIGKILL, not an exception:
a real crash runs no ``finally`` blocks, closes no connections politely and flushes nothing, and
that is exactly what recovery has to survive. ``EO_FAULT_ACTION=raise`` makes a writer task's
first attempt raise instead: a task failure Spark retries, not a crash.
"""

from __future__ import annotations

import os
import signal
import threading

POINTS = (
    "before-prepare",
    "after-some-prepared",
    "before-decision",
    "after-decision",
    "after-some-commits",
    "after-commits",
)


def armed(point: str, batch_id: int | None = None) -> bool:
    """Whether the configured fault matches this point (and batch, if one is configured)."""
    if point not in POINTS:
        raise ValueError(f"unknown crash point {point!r}; known: {', '.join(POINTS)}")
    if os.environ.get("EO_FAULT_POINT") != point:
        return False
    wanted = os.environ.get("EO_FAULT_BATCH")
    return wanted is None or batch_id is None or wanted == str(batch_id)


class InjectedFaultError(RuntimeError):
    """The failure ``EO_FAULT_ACTION=raise`` injects."""


def crash_point(
    point: str, batch_id: int | None = None, *, pid: int | None = None, first_attempt: bool = True
) -> None:
    """SIGKILL ``pid`` (default: this process) if the fault ``point`` is armed.

    With ``EO_FAULT_ACTION=stop`` the process is frozen with SIGSTOP instead: a driver that
    looks dead (a lost node, a long GC pause) but resumes later, i.e. a zombie. With
    ``EO_FAULT_ACTION=raise`` it raises ``InjectedFaultError`` on the ``first_attempt`` only,
    so a retry gets through.
    """
    if armed(point, batch_id):
        action = os.environ.get("EO_FAULT_ACTION", "kill")
        if action == "raise":
            if first_attempt:
                raise InjectedFaultError(f"fault injected at {point} of batch {batch_id}")
            return
        sig = signal.SIGSTOP if action == "stop" else signal.SIGKILL
        if pid is None:
            # Signal the calling thread itself (tgkill): it stops or dies before kill returns
            # to Python. A process-directed signal may be taken by another thread, and this
            # one could run on for a moment (seen: a "before-decision" stop after the decision).
            signal.pthread_kill(threading.get_ident(), sig)
        else:
            os.kill(pid, sig)
