"""Helpers for the servers tests start as child processes (Kafka broker, S3 server)."""

from __future__ import annotations

import ctypes
import signal
import socket


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


_PR_SET_PDEATHSIG = 1
_prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
"""Resolved here, in the parent, so the forked child only makes one plain libc call (Linux)."""


def die_with_parent() -> None:
    """Have Linux SIGTERM the child (a ``preexec_fn``) when the test process dies first.

    A test run killed outright (a hard timeout, Ctrl-C twice) would otherwise leave servers
    running on a shared machine.
    """
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
