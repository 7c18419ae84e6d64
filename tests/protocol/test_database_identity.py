"""Recovery, the sweep and clean-up visit every database, whatever its DSN looks like.

A DSN need not name a host (``service=prod``, ``hostaddr=10.0.0.5``): two sinks on two
databases behind such DSNs must stay two databases, or a decided batch's participants in the
second one are never committed (F2 of the second protocol audit). Databases are told apart by
what the server says it is, never by the DSN's text.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from eo_jobs.pgserver import PgServer
from eo_jobs.protocol.control import ControlStore
from eo_jobs.protocol.coordinator import Coordinator, Prepared
from eo_jobs.protocol.recovery import distinct
from eo_jobs.protocol.xa import PreparedTransactions
from tests.protocol import harness

SINKS = ("ledger", "replica")


@pytest.fixture
def services(
    pg_server: PgServer, pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """Two databases of the test server, each reached only through a ``service=`` DSN."""
    first = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    second = psycopg.conninfo.conninfo_to_dict(
        pg_server.create_database(f"{first['dbname']}_second")
    )
    lines: list[str] = []
    for sink, info in zip(SINKS, (first, second), strict=True):
        lines += [f"[{sink}]", *(f"{k}={info[k]}" for k in ("host", "port", "dbname", "user"))]
    service_file = tmp_path / "pg_service.conf"
    service_file.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("PGSERVICEFILE", str(service_file))
    return {sink: f"service={sink}" for sink in SINKS}


def test_two_databases_behind_service_dsns_stay_two(services: dict[str, str]) -> None:
    stores = {sink: PreparedTransactions(dsn) for sink, dsn in services.items()}
    assert len(distinct(stores)) == 2


def test_one_database_reached_by_two_dsn_spellings_is_visited_once(pg_dsn: str) -> None:
    info = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    spelled = psycopg.conninfo.make_conninfo(pg_dsn, host="localhost", hostaddr=info["host"])
    stores = {"a": PreparedTransactions(pg_dsn), "b": PreparedTransactions(spelled)}
    assert len(distinct(stores)) == 1


def test_a_decided_batch_in_two_service_databases_is_committed_in_both_after_a_crash(
    services: dict[str, str],
) -> None:
    for dsn in services.values():
        harness.create_table(dsn)
    stores = {sink: PreparedTransactions(dsn) for sink, dsn in services.items()}
    first = Coordinator(harness.PIPELINE, 1, ControlStore(services["ledger"]), stores)
    first.startup()
    assert first.begin(harness.QUERY, 0, harness.offsets(0)) is None
    prepared: list[Prepared] = []
    rows = harness.batch_rows(0)
    for sink, dsn in services.items():
        gid = first.gid(harness.QUERY, sink, 0, 0, 0)
        count = harness.writer(dsn).write(rows, gid=gid, pipeline=harness.PIPELINE, batch_id=0)
        prepared.append(Prepared(sink, gid, count))
    first.decide(harness.QUERY, 0, prepared, harness.offsets(0), 0.0)
    # The driver dies here, before phase 2; the next one starts with epoch 2.
    fresh = {sink: PreparedTransactions(dsn) for sink, dsn in services.items()}
    Coordinator(harness.PIPELINE, 2, ControlStore(services["ledger"]), fresh).startup()
    for dsn in services.values():
        assert harness.audit(dsn, range(1)) == harness.Audit(
            rows=harness.ROWS_PER_BATCH,
            distinct=harness.ROWS_PER_BATCH,
            duplicates=0,
            missing=0,
            unexpected=0,
            prepared_left=0,
        )
