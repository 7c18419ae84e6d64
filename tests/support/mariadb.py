"""A real MariaDB server for tests: the server itself is :mod:`eo_jobs.mariadbserver` (the bench
starts its own through it too); this module adds the pytest fixtures and the XA helpers tests use.

One server per test process (each xdist worker is one, as with ``pg_server``), a fresh database
per test. A worker runs its tests one at a time, so a test may stop and start its worker's
server (:meth:`MariaDbServer.restart`) without disturbing another test.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from eo_jobs.mariadbserver import (
    DEFAULT_SETTINGS,
    HOME_ENV,
    INSTALL_SCRIPT,
    MariaDbDatabase,
    MariaDbInstall,
    MariaDbServer,
    MariaDbSetupError,
    find_install,
    temporary_server,
)

if TYPE_CHECKING:
    from eo_jobs.mariadbserver import Connection

__all__ = [
    "DEFAULT_SETTINGS",
    "HOME_ENV",
    "INSTALL_SCRIPT",
    "Connection",
    "MariaDbDatabase",
    "MariaDbInstall",
    "MariaDbServer",
    "MariaDbSetupError",
    "Xid",
    "connection_id",
    "find_install",
    "mariadb_db",
    "mariadb_server",
    "recovered",
    "temporary_server",
    "wait_disconnected",
]


_counter = itertools.count()


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[MariaDbServer]:
    """This test process's MariaDB server (binary log on), removed at the end."""
    server = temporary_server()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def mariadb_db(mariadb_server: MariaDbServer, request: pytest.FixtureRequest) -> MariaDbDatabase:
    """A new, empty database for one test. XA RECOVER lists the whole server's prepared
    branches: a test filters them by its own xids (see :func:`recovered`)."""
    name = f"t{next(_counter)}_{abs(hash(request.node.nodeid)) % 10**8}"
    return mariadb_server.create_database(name)


@dataclass(frozen=True)
class Xid:
    """An XA transaction id: ``gtrid`` and ``bqual`` up to 64 bytes each, ``format_id``."""

    gtrid: bytes
    bqual: bytes = b""
    format_id: int = 1

    def sql(self) -> str:
        """The xid as XA statements take it, in hex literals (any bytes are safe)."""
        return f"X'{self.gtrid.hex()}',X'{self.bqual.hex()}',{self.format_id}"


def recovered(conn: Connection) -> list[Xid]:
    """``XA RECOVER``'s prepared branches (the whole server's), as xids."""
    with conn.cursor() as cur:
        cur.execute("XA RECOVER")
        rows = cur.fetchall()
    xids = []
    for format_id, gtrid_length, bqual_length, data in rows:
        raw = data if isinstance(data, bytes) else str(data).encode()
        xids.append(
            Xid(raw[:gtrid_length], raw[gtrid_length : gtrid_length + bqual_length], format_id)
        )
    return xids


def connection_id(conn: Connection) -> int:
    """The server's id of a connection (what KILL CONNECTION and PROCESSLIST name)."""
    with conn.cursor() as cur:
        cur.execute("SELECT CONNECTION_ID()")
        row = cur.fetchone()
    assert row is not None
    return int(row[0])


def wait_disconnected(server: MariaDbServer, connection_id: int, timeout: float = 10.0) -> None:
    """Wait until the server has ended connection ``connection_id``.

    A client's close returns before the server has processed it, and while the preparing
    connection lives its branch stays attached to it: XA COMMIT from elsewhere answers
    XAER_NOTA until then.
    """
    deadline = time.monotonic() + timeout
    with server.connect() as conn, conn.cursor() as cur:
        while True:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = %s",
                (connection_id,),
            )
            row = cur.fetchone()
            if row is not None and row[0] == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"connection {connection_id} still open after {timeout} s")
            time.sleep(0.02)
