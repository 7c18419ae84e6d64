"""A lazily opened autocommit connection that reopens after the server went away.

The control store and every prepared-transaction store hold one: recovery and phase 2 must
survive a PostgreSQL restart, a failover or an idle timeout on a quiet stream between two calls
without the caller managing reconnects. ``run`` retries an idempotent piece of work once on a
fresh connection when the old one turned out to be dead; work whose outcome would be ambiguous
after a lost reply (the decision) calls ``connection()`` directly and lets the error through.

A connection that broke is reopened patiently: for up to ``REOPEN_SECONDS`` a refused connect
or a server "starting up" / "in recovery" is retried with backoff, since a crash restart or a
failover takes seconds, and failing the batch for that would turn every failover into a driver
restart. A first connect fails fast: that server was never seen.

Every connection has TCP keepalives (a peer that vanished is noticed in about a minute, not
after the kernel's two hours) and ``lock_timeout`` / ``statement_timeout``, so a stuck lock
holder cannot hang a driver or the operator forever.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

T = TypeVar("T")

KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}
"""libpq parameters (connect keyword arguments): a peer that vanished is noticed in about a
minute. Writer tasks' connections use them too."""
LOCK_TIMEOUT_MS = 10_000
STATEMENT_TIMEOUT_MS = 120_000
REOPEN_SECONDS = 60.0
"""How long a connection that broke waits for its server to come back before giving up."""


def with_keepalives(dsn: str) -> str:
    """``dsn`` with ``KEEPALIVES`` (values the DSN gives win)."""
    given = psycopg.conninfo.conninfo_to_dict(dsn)
    return psycopg.conninfo.make_conninfo(dsn, **{**KEEPALIVES, **given})


def connect_patiently(
    conninfo: str, wait_seconds: float, *, autocommit: bool = False, connect_timeout: int = 10
) -> psycopg.Connection[Any]:
    """Connect, retrying a failed connect with backoff for up to ``wait_seconds``."""
    deadline = time.monotonic() + wait_seconds
    pause = 0.2
    while True:
        try:
            return psycopg.connect(conninfo, autocommit=autocommit, connect_timeout=connect_timeout)
        except psycopg.OperationalError:
            if time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 5.0)


class LazyConnection:
    """One autocommit connection to ``dsn``, (re)opened on demand."""

    def __init__(
        self,
        dsn: str,
        *,
        connect_timeout: int = 10,
        lock_timeout_ms: int = LOCK_TIMEOUT_MS,
        statement_timeout_ms: int = STATEMENT_TIMEOUT_MS,
    ) -> None:
        self.dsn = dsn
        self._timeout = connect_timeout
        self._options = (
            f"-c lock_timeout={lock_timeout_ms} -c statement_timeout={statement_timeout_ms}"
        )
        self._conn: psycopg.Connection[Any] | None = None
        self._seen = False
        """Whether a connection was ever opened: only then is a failed reopen waited out."""

    def connection(self) -> psycopg.Connection[Any]:
        """The open connection; a closed or broken one is replaced."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            given = psycopg.conninfo.conninfo_to_dict(self.dsn).get("options") or ""
            dsn = psycopg.conninfo.make_conninfo(
                self.dsn,
                connect_timeout=self._timeout,
                options=f"{given} {self._options}".strip(),
            )
            wait = REOPEN_SECONDS if self._seen else 0.0
            self._conn = connect_patiently(
                with_keepalives(dsn), wait, autocommit=True, connect_timeout=self._timeout
            )
            self._seen = True
        return self._conn

    def run(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run idempotent ``work``; once more on a new connection if the old one was dead.

        Only a broken connection is retried: a lock or statement timeout, or any SQL error,
        leaves the connection usable and is the caller's to see.
        """
        try:
            return work(self.connection())
        except psycopg.OperationalError:
            if not self.lost():
                raise
            self.close()
            return work(self.connection())

    def lost(self) -> bool:
        """Whether the connection died (after an error: the server, not the SQL, failed)."""
        return self._conn is None or self._conn.broken or self._conn.closed

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
