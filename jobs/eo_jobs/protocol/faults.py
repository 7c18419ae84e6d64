"""Fault injection at the protocol's crash points, for tests and ``eo demo``.

Setting ``EO_FAULT_POINT`` to one of ``POINTS`` makes the process kill itself with SIGKILL when
it reaches that point (optionally only for batch ``EO_FAULT_BATCH``). SIGKILL, not an exception:
a real crash runs no ``finally`` blocks, closes no connections politely and flushes nothing, and
that is exactly what recovery has to survive. ``EO_FAULT_ACTION=raise`` makes a writer task's
first attempt raise instead: a task failure Spark retries, not a crash.

``EO_FAULT_FILE`` names a JSON file ``{"point": ..., "batch": ..., "action": ...}`` read at every
crash point instead of the variables, so a chaos run can arm a fault in a driver that is already
running (and in its writer tasks, which share the file system in local mode). No file, no fault.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

POINTS = (
    "before-prepare",
    "after-some-prepared",
    "before-decision",
    "after-decision",
    "after-some-commits",
    "after-commits",
    "after-spark-commit-log",
)


def _settings() -> dict[str, str]:
    """The armed fault: from ``EO_FAULT_FILE`` when set (read each time), else the variables."""
    path = os.environ.get("EO_FAULT_FILE")
    if path is None:
        return {
            key: os.environ[f"EO_FAULT_{key.upper()}"]
            for key in ("point", "batch", "action")
            if f"EO_FAULT_{key.upper()}" in os.environ
        }
    try:
        loaded = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {key: str(value) for key, value in loaded.items() if value is not None}


def armed(point: str, batch_id: int | None = None) -> bool:
    """Whether the configured fault matches this point (and batch, if one is configured)."""
    return armed_action(point, batch_id) is not None


def armed_action(point: str, batch_id: int | None = None) -> str | None:
    """The action (kill, stop, raise) of the fault armed at ``point`` for this batch, or None.

    Also for code that acts at the point itself in another process (eo's JVM writer tasks).
    """
    if point not in POINTS:
        raise ValueError(f"unknown crash point {point!r}; known: {', '.join(POINTS)}")
    settings = _settings()
    return settings.get("action", "kill") if _matches(settings, point, batch_id) else None


def _matches(settings: dict[str, str], point: str, batch_id: int | None) -> bool:
    if settings.get("point") != point:
        return False
    wanted = settings.get("batch")
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
    action = armed_action(point, batch_id)
    if action is not None:
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
