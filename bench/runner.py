"""Run one driver as a child process and time it from the outside.

Wall time is process start to exit. Batch timings come from the ``{"event": "batch", ...}``
lines every variant prints at the end of a batch with the batch's own duration in
``seconds``; each line is stamped on arrival, so a batch ran from (arrival - seconds) to arrival
on one clock for all variants, whichever program printed it. Every other ``{"event": ...}``
line (``recovered``, ``replay``) is kept with its arrival time too, for the recovery timing.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EVENT_PREFIX = '{"event": '


@dataclass(frozen=True)
class Batch:
    """One micro-batch as seen from the outside."""

    batch_id: int
    seconds: float
    ended: float
    """``time.monotonic()`` when its line arrived."""
    protocol_ms: float | None = None
    """``eo run`` only: decide + commit (phase 2) milliseconds, the protocol's own cost."""

    @property
    def started(self) -> float:
        """When it began, on the same clock as ``ended``."""
        return self.ended - self.seconds


@dataclass(frozen=True)
class Event:
    """One JSON event line of a driver, stamped with ``time.monotonic()`` on arrival."""

    arrived: float
    record: dict[str, Any]


@dataclass(frozen=True)
class Run:
    """A finished child: exit code, wall seconds, its batches and where its output is."""

    code: int
    wall: float
    batches: tuple[Batch, ...]
    log: Path
    events: tuple[Event, ...] = ()

    @property
    def streaming(self) -> float:
        """First batch start to last batch end (0 when no batch ran)."""
        if not self.batches:
            return 0.0
        return max(b.ended for b in self.batches) - min(b.started for b in self.batches)

    def steady_after(self, warmup: int) -> float:
        """End of batch ``warmup`` to the last batch's end: every batch after the first
        ``warmup``, with the time between batches (0 when no batch is left after them)."""
        if warmup < 1 or len(self.batches) <= warmup:
            return 0.0
        return self.batches[-1].ended - self.batches[warmup - 1].ended

    def tail(self, lines: int = 40) -> str:
        """The end of the child's output, to show why it failed."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (no interpolation: a reported value is a measured one)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


class Driver:
    """A running child driver whose event lines are collected as they arrive."""

    def __init__(self, args: Sequence[str], env: Mapping[str, str], log: Path, cwd: Path) -> None:
        self.log = log
        self.events: list[Event] = []
        self._changed = threading.Condition()
        self._sink = log.open("w")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            list(args),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        """Copy the child's output to its log, stamping event lines as they arrive."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            arrived = time.monotonic()
            self._sink.write(line)
            if line.startswith(EVENT_PREFIX):
                with contextlib.suppress(ValueError):
                    event = Event(arrived, json.loads(line))
                    with self._changed:
                        self.events.append(event)
                        self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, match: Callable[[Event], bool], timeout: float) -> Event | None:
        """The first event that matches, waiting for it (None: the child ended or timed out)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = next((e for e in self.events if match(e)), None)
                if found is not None or (
                    self.proc.poll() is not None and not self._reader.is_alive()
                ):
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._changed.wait(min(left, 0.5))

    def kill(self) -> float:
        """SIGKILL the whole process group (driver, JVM, Python workers); when it was sent."""
        killed = time.monotonic()
        _kill_group(self.proc.pid)
        return killed

    def finish(self, timeout: float) -> Run:
        """Wait for the exit (the group is killed after ``timeout`` seconds); the run.

        Wall time ends when the driver process exits; the JVM it leaves behind while shutting
        down (which keeps the output pipe open a little longer) is not counted, then killed.
        """
        try:
            code = self.proc.wait(max(0.0, timeout - (time.monotonic() - self.started)))
        except subprocess.TimeoutExpired:
            _kill_group(self.proc.pid)
            code = self.proc.wait()
        wall = time.monotonic() - self.started
        self._reader.join(10)
        _kill_group(self.proc.pid)
        self._reader.join()
        self._sink.close()
        events = tuple(self.events)
        batches = sorted(
            (_batch(e) for e in events if e.record.get("event") == "batch"), key=lambda b: b.ended
        )
        return Run(code, wall, tuple(batches), self.log, events)


def _batch(event: Event) -> Batch:
    record = event.record
    protocol = None
    if "decide_ms" in record:
        protocol = float(record["decide_ms"]) + float(record["commit_ms"])
    return Batch(int(record["batch"]), float(record["seconds"]), event.arrived, protocol)


def run(args: Sequence[str], env: Mapping[str, str], log: Path, cwd: Path, timeout: float) -> Run:
    """Run ``args`` to its exit (its process group is killed after ``timeout`` seconds)."""
    return Driver(args, env, log, cwd).finish(timeout)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
