"""Child processes that cannot outlive the test run, and polling with informative failures.

Every process is started through ``setpriv --pdeathsig KILL`` so the kernel kills it if the
thread that started it dies, even when pytest itself is killed with SIGKILL and no fixture
finaliser runs. Each runs in its own session so a Ctrl-C in the terminal reaches pytest only,
which then stops the processes in order.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

PDEATHSIG = ("setpriv", "--pdeathsig", "KILL", "--")


def free_port() -> int:
    """A loopback TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def spawn(
    argv: Sequence[str],
    *,
    log: IO[bytes],
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session, tied to this thread's life, output into ``log``."""
    return subprocess.Popen(
        [*PDEATHSIG, *argv],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env=None if env is None else dict(env),
        start_new_session=True,
    )


def kill_group(pid: int, sig: int) -> bool:
    """Send ``sig`` to the process group led by ``pid``; False when the group is gone."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return False
    return True


class ManagedProcess:
    """A long-running server (etcd, apiserver, ...) with its log kept for error messages."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the process, appending its output to ``log_path``."""
        with self.log_path.open("ab") as log:
            self._proc = spawn(self.argv, log=log)

    def alive(self) -> bool:
        """True while the process has not exited."""
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL it if it has not exited in ``timeout``."""
        if self._proc is None:
            return
        kill_group(self._proc.pid, signal.SIGTERM)
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_group(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        kill_group(self._proc.pid, signal.SIGKILL)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the process's log, to explain a failure."""
        if not self.log_path.exists():
            return "(no log)"
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


def wait_until(
    condition: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    watched: Sequence[ManagedProcess] = (),
    interval: float = 0.1,
) -> None:
    """Poll ``condition`` until true; fail fast, with its log, if a watched process dies."""
    deadline = time.monotonic() + timeout
    while True:
        for process in watched:
            if not process.alive():
                raise RuntimeError(
                    f"{process.name} exited while waiting for {what}; "
                    f"log {process.log_path}:\n{process.log_tail()}"
                )
        if condition():
            return
        if time.monotonic() > deadline:
            logs = "".join(f"\n--- {p.name} ({p.log_path}):\n{p.log_tail()}" for p in watched)
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}{logs}")
        time.sleep(interval)
