"""A lazily opened autocommit connection that reopens after the server went away.

The control store and every prepared-transaction store hold one: recovery and phase 2 must
survive a PostgreSQL restart between two calls without the caller managing reconnects.
"""

from __future__ import annotations

from typing import Any

import psycopg


class LazyConnection:
    """One autocommit connection to ``dsn``, (re)opened on demand."""

    def __init__(self, dsn: str, *, connect_timeout: int = 10) -> None:
        self.dsn = dsn
        self._timeout = connect_timeout
        self._conn: psycopg.Connection[Any] | None = None

    def connection(self) -> psycopg.Connection[Any]:
        """The open connection; a closed or broken one is replaced."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=self._timeout)
        return self._conn

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
