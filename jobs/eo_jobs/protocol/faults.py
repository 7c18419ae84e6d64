"""Fault injection at the protocol's crash points, for tests and ``eo demo``.

Setting ``EO_FAULT_POINT`` to one of ``POINTS`` makes the process kill itself with SIGKILL when
it reaches that point (optionally only for batch ``EO_FAULT_BATCH``). SIGKILL, not an exception:
a real crash runs no ``finally`` blocks, closes no connections politely and flushes nothing, and
that is exactly what recovery has to survive.
"""

from __future__ import annotations

import os
import signal

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


def crash_point(point: str, batch_id: int | None = None, *, pid: int | None = None) -> None:
    """SIGKILL ``pid`` (default: this process) if the fault ``point`` is armed.

    With ``EO_FAULT_ACTION=stop`` the process is frozen with SIGSTOP instead: a driver that
    looks dead (a lost node, a long GC pause) but resumes later, i.e. a zombie.
    """
    if armed(point, batch_id):
        action = os.environ.get("EO_FAULT_ACTION", "kill")
        sig = signal.SIGSTOP if action == "stop" else signal.SIGKILL
        os.kill(pid if pid is not None else os.getpid(), sig)
