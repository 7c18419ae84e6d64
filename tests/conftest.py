"""Shared fixtures: a real PostgreSQL server for the session, a fresh database per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from eo_jobs.pgserver import PgServer, temporary_server

pytest_plugins = [
    "tests.support.kafka",
    "tests.support.s3",
    "tests.support.mariadb",
    "tests.cluster.plugin",
]

_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    """One embedded PostgreSQL server (max_prepared_transactions = 64) for the session."""
    with temporary_server(settings={"fsync": "off", "max_connections": "200"}) as server:
        yield server


@pytest.fixture
def pg_dsn(pg_server: PgServer, request: pytest.FixtureRequest) -> str:
    """A new, empty database for one test, as a DSN."""
    name = f"t{next(_counter)}_{abs(hash(request.node.nodeid)) % 10**8}"
    return pg_server.create_database(name)


@pytest.fixture
def repo_root() -> Path:
    """The repository root (examples, crds, charts live there)."""
    return Path(__file__).resolve().parent.parent
