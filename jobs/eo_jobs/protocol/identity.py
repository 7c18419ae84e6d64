"""Which database a connection reached, as the server itself says.

``pg_prepared_xacts`` is scoped to one running server and one database, so recovery, the sweep
and a batch's clean-up list each database's prepared transactions once. Telling databases apart
by a DSN's text collapses different ones: ``service=prod`` and ``service=replica`` both say
nothing of a host, nor do two ``hostaddr=`` DSNs of one port and database name, and a decided
batch's participants in the database left out were never committed. So the key is what the
server reports: its system identifier (where the role may read it), the start time of the
running postmaster (which also tells apart clones of one base backup that share the identifier)
and the database name. Two spellings of one database (``localhost`` and ``127.0.0.1``) share a
key; different databases never do. Splitting one database in two would only mean listing it
twice (every finish is idempotent); merging two loses data, so nothing here guesses.
"""

from __future__ import annotations

import weakref
from typing import Any

import psycopg

IDENTITY_SQL = """SELECT current_database(), pg_postmaster_start_time()::text,
    CASE WHEN has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE')
         THEN (SELECT system_identifier::text FROM pg_catalog.pg_control_system()) END"""
"""The database, the running server's start, and the cluster's identifier (NULL where the
role may not call ``pg_control_system()``, as on some managed services)."""

DatabaseKey = tuple[str, str, str]

_known: weakref.WeakKeyDictionary[psycopg.Connection[Any], DatabaseKey] = (
    weakref.WeakKeyDictionary()
)
"""Keys of open connections: a connection reaches one database for its whole life, and a
reconnect is a new connection object (asked again, since a DSN may now reach another server)."""


def database_key(conn: psycopg.Connection[Any]) -> DatabaseKey:
    """(database, server start, system identifier) of the database ``conn`` is connected to."""
    key = _known.get(conn)
    if key is None:
        row = conn.execute(IDENTITY_SQL).fetchone()
        assert row is not None
        key = (str(row[0]), str(row[1]), str(row[2] or ""))
        _known[conn] = key
    return key
