"""Run one driver as a child process and time it from the outside.

Wall time is process start to exit. Batch timings come from the ``{"event": "batch", ...}``
lines every variant prints at the end of a batch with the batch's own duration in
``seconds``; each line is stamped on arrival, so a batch ran from (arrival - seconds) to arrival
on one clock for all variants, whichever program printed it.
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

BATCH_PREFIX = '{"event": "batch"'


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
class Run:
    """A finished child: exit code, wall seconds, its batches and where its output is."""

    code: int
    wall: float
    batches: tuple[Batch, ...]
    log: Path

    @property
    def streaming(self) -> float:
        """First batch start to last batch end (0 when no batch ran)."""
        if not self.batches:
            return 0.0
        return max(b.ended for b in self.batches) - min(b.started for b in self.batches)

    def tail(self, lines: int = 40) -> str:
        """The end of the child's output, to show why it failed."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (no interpolation: a reported value is a measured one)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def run(args: Sequence[str], env: Mapping[str, str], log: Path, cwd: Path, timeout: float) -> Run:
    """Run ``args`` to its exit (its process group is killed after ``timeout`` seconds).

    Wall time ends when the driver process exits; the JVM it leaves behind while shutting
    down (which keeps the output pipe open a little longer) is not counted, then killed.
    """
    batches: list[Batch] = []
    with log.open("w") as sink:
        started = time.monotonic()
        proc = subprocess.Popen(
            list(args),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )
        reader = threading.Thread(target=_read, args=(proc, sink, batches), daemon=True)
        reader.start()
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            code = proc.wait()
        wall = time.monotonic() - started
        reader.join(10)
        _kill_group(proc.pid)
        reader.join()
    return Run(code, wall, tuple(sorted(batches, key=lambda b: b.ended)), log)


def _read(proc: subprocess.Popen[str], sink: TextIO, batches: list[Batch]) -> None:
    """Copy the child's output to its log, stamping batch lines as they arrive."""
    assert proc.stdout is not None
    for line in proc.stdout:
        arrived = time.monotonic()
        sink.write(line)
        if line.startswith(BATCH_PREFIX):
            record = json.loads(line)
            protocol = None
            if "decide_ms" in record:
                protocol = float(record["decide_ms"]) + float(record["commit_ms"])
            batches.append(Batch(int(record["batch"]), float(record["seconds"]), arrived, protocol))


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
