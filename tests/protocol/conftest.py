"""Fixtures of the protocol tests: the sink database, of each kind the protocol supports."""

from __future__ import annotations

import pytest

SINK_KINDS = ("postgresql", "mariadb")


@pytest.fixture(params=SINK_KINDS)
def sink_dsn(request: pytest.FixtureRequest, pg_dsn: str) -> str:
    """The sink's DSN: the control database itself (PostgreSQL), or a fresh MariaDB database
    (the control tables stay in ``pg_dsn``)."""
    if request.param == "postgresql":
        return pg_dsn
    return str(request.getfixturevalue("mariadb_db").dsn)
