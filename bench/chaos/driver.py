"""One `eo run` driver of the chaos pipeline: a child process group, like a pod.

It runs in streaming mode (not available-now): the stream keeps growing while faults land.
Its JSON event lines are followed so the harness knows which batches it decided.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench import fast_jvm


class ChaosDriver:
    """An `eo run --epoch E` process group with a fault file it re-reads at every crash point."""

    def __init__(
        self,
        spec: Path,
        epoch: int,
        dsn: str,
        fault_file: Path,
        log: Path,
        mysql_dsn: str | None = None,
    ) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("EO_FAULT")}
        if mysql_dsn is not None:
            env["CHAOS_MYSQL_DSN"] = mysql_dsn
        env.update(
            {
                "CHAOS_DSN": dsn,
                "EO_FAULT_FILE": str(fault_file),
                "EO_SPARK_DRIVER_JAVA_OPTIONS": fast_jvm.java_options(),
                "EO_LOG_LEVEL": "WARNING",
                "PYSPARK_PYTHON": sys.executable,
            }
        )
        self.epoch = epoch
        self.log_path = log
        self.decided: list[int] = []
        """Batch ids this driver decided (replays excluded), in order."""
        self._log = log.open("w", encoding="utf-8")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "eo_jobs.cli",
                "run",
                str(spec),
                "--epoch",
                str(epoch),
                "--metrics-port",
                "0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._follow, daemon=True)
        self._reader.start()

    def _follow(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._log.write(line)
            if line.startswith('{"event": "batch"'):
                with contextlib.suppress(ValueError, KeyError):
                    self.decided.append(int(json.loads(line)["batch"]))
        self._log.flush()

    def alive(self) -> bool:
        """Whether the driver process still runs (a stopped one counts as alive)."""
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        """Signal the whole process group (driver, JVM, Python workers)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def wait_for_batches(self, count: int, timeout: float) -> bool:
        """Until it decided ``count`` batches in all; False when it died or time ran out."""
        deadline = time.monotonic() + timeout
        while len(self.decided) < count:
            if not self.alive() or time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def wait(self, timeout: float) -> int | None:
        """Exit code (negative: killed by that signal), or None when still running."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self.signal(signal.SIGKILL)  # leftovers of the group (orphaned Python workers)
        self._reader.join(10)
        self._log.close()
        return code

    def stop(self) -> int:
        """SIGTERM (stop at a batch boundary), SIGKILL after a minute."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        code = self.wait(60)
        if code is None:
            self.signal(signal.SIGKILL)
            code = self.wait(30)
        return code if code is not None else -signal.SIGKILL
