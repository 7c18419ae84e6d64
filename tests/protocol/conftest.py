"""Fixtures of the protocol tests: the sink and control databases, of each kind the protocol
supports, and the control store on the latter."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from eo_jobs.protocol.control_api import ControlDatabase
from eo_jobs.protocol.databases import control_store

SINK_KINDS = ("postgresql", "mariadb")


@pytest.fixture(params=SINK_KINDS)
def sink_dsn(request: pytest.FixtureRequest, pg_dsn: str) -> str:
    """The sink's DSN: the control database itself (PostgreSQL), or a fresh MariaDB database
    (the control tables stay in ``pg_dsn``)."""
    if request.param == "postgresql":
        return pg_dsn
    return str(request.getfixturevalue("mariadb_db").dsn)


CONTROL_KINDS = ("postgresql", "mariadb")


@pytest.fixture(params=CONTROL_KINDS)
def control_dsn(request: pytest.FixtureRequest, pg_dsn: str) -> str:
    """The control database's DSN: ``pg_dsn``, or a fresh MariaDB database (the same one a
    MariaDB ``sink_dsn`` of the test gets: a pipeline whose only database is MySQL)."""
    if request.param == "postgresql":
        return pg_dsn
    return str(request.getfixturevalue("mariadb_db").dsn)


@pytest.fixture
def control(control_dsn: str) -> Iterator[ControlDatabase]:
    """The control store on ``control_dsn`` (either kind), its tables made, closed after."""
    store = control_store(control_dsn)
    store.ensure_schema()
    yield store
    store.close()
