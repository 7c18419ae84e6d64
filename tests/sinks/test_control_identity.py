"""The decision log has one stable home: a spec edit cannot make eo forget it.

Real PostgreSQL databases play two sinks, and real MariaDB databases do (then the control
database is the first MySQL sink's, or a MySQL ``spec.control``); the driver's protocol steps run
through the same binding, coordinator and writer code as ``eo run``.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
import pytest

from eo_jobs.pgserver import PgServer
from eo_jobs.protocol.coordinator import Coordinator, Prepared
from eo_jobs.protocol.databases import control_store, kind
from eo_jobs.protocol.gid import pipeline_prefix
from eo_jobs.protocol.mysql_xa import MySqlDsn, MySqlPreparedTransactions
from eo_jobs.protocol.registry import ControlMovedError
from eo_jobs.sinks.postgres.binding import Bound, bind, sink_dsns
from eo_jobs.spec import Pipeline, parse_pipeline
from tests.protocol import harness
from tests.support.mariadb import MariaDbServer

QUERY = harness.QUERY


def _sink(name: str) -> dict[str, Any]:
    """A sink of the kind its database (``DSN_<NAME>``) is."""
    variable = f"DSN_{name.upper()}"
    dsn = os.environ[variable]
    if kind(dsn) == "mysql":
        table = f"{MySqlDsn.parse(dsn).database}.{harness.MYSQL_TABLE}"
        return {"name": name, "mysql": {"dsn": {"env": variable}, "table": table}}
    return {"name": name, "postgres": {"dsn": {"env": variable}, "table": "public.ledger"}}


def _pipeline(sinks: list[str], control: str | None = None) -> Pipeline:
    spec: dict[str, Any] = {
        "source": {"files": {"path": "/in", "format": "json", "schema": "id BIGINT"}},
        "sinks": [_sink(name) for name in sinks],
        "checkpoint": {"location": "/tmp/checkpoint"},
    }
    if control is not None:
        spec["control"] = {"dsn": {"env": control}}
    return parse_pipeline(
        {
            "apiVersion": "eo.dev/v1alpha1",
            "kind": "ExactlyOncePipeline",
            "metadata": {"name": "ledger", "namespace": "default"},
            "spec": spec,
        }
    )


@pytest.fixture(params=("postgresql", "mariadb"))
def databases(
    request: pytest.FixtureRequest,
    pg_server: PgServer,
    pg_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, str]:
    """Two sink databases (A, B) and a spare one (C), each with the ledger table; all in
    PostgreSQL, or all in MariaDB (then the control database is MySQL too)."""
    if request.param == "mariadb":
        server: MariaDbServer = request.getfixturevalue("mariadb_server")
        base = str(request.getfixturevalue("mariadb_db").name)
        dsns = {n: server.create_database(f"{base}_{n.lower()}").dsn for n in "ABC"}
    else:
        base = str(psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"])
        dsns = {name: pg_server.create_database(f"{base}_{name.lower()}") for name in "ABC"}
    for name, dsn in dsns.items():
        harness.create_table(dsn)
        monkeypatch.setenv(f"DSN_{name}", dsn)
    return dsns


def _bound(pipeline: Pipeline) -> Bound:
    bound = bind(pipeline, sink_dsns(pipeline))
    bound.claim()
    return bound


def _prepare(coord: Coordinator, bound: Bound, sink: str, batch: int) -> Prepared:
    gid = coord.gid(QUERY, sink, batch, 0, 0)
    rows = harness.batch_rows(batch)
    count = harness.writer(bound.dsns[sink]).write(
        rows, gid=gid, pipeline=coord.pipeline, batch_id=batch
    )
    return Prepared(sink, gid, count)


def _prepared_left(dsn: str) -> int:
    if kind(dsn) == "mysql":
        store = MySqlPreparedTransactions(dsn)
        try:
            return len(store.in_doubt(pipeline_prefix(harness.PIPELINE)))
        finally:
            store.close()
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()"
        ).fetchone()
    return int(row[0]) if row else -1


def test_reordering_the_sinks_is_refused_instead_of_forgetting_decided_batches(
    databases: dict[str, str],
) -> None:
    bound = _bound(_pipeline(["a", "b"]))
    coord = Coordinator(bound.pipeline, 1, bound.control, bound.stores)
    coord.startup()
    assert coord.begin(QUERY, 0, harness.offsets(0)) is None
    prepared = [_prepare(coord, bound, "a", 0), _prepare(coord, bound, "b", 0)]
    decided = coord.decide(QUERY, 0, prepared, harness.offsets(0), 0.0)
    # The driver dies after committing A's participant only (crash point after-some-commits).
    bound.stores["a"].commit(decided.winners[0].gid)
    bound.close()

    with pytest.raises(ControlMovedError, match="decided by the control database"):
        _bound(_pipeline(["b", "a"]))

    # The original order still recovers: B's decided participant is rolled forward.
    again = _bound(_pipeline(["a", "b"]))
    report = Coordinator(again.pipeline, 2, again.control, again.stores).startup()
    assert report.committed == [decided.winners[1].gid]
    assert harness.audit(databases["B"], range(1)).rows == harness.ROWS_PER_BATCH


def test_re_pointing_the_first_sink_at_another_database_is_refused(
    databases: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _bound(_pipeline(["a", "b"])).close()
    monkeypatch.setenv("DSN_A", databases["C"])
    with pytest.raises(ControlMovedError):
        _bound(_pipeline(["a", "b"]))


def test_a_removed_sinks_database_is_still_resolved_by_recovery(
    databases: dict[str, str],
) -> None:
    bound = _bound(_pipeline(["a", "b"]))
    coord = Coordinator(bound.pipeline, 1, bound.control, bound.stores)
    coord.startup()
    assert coord.begin(QUERY, 0, harness.offsets(0)) is None
    _prepare(coord, bound, "a", 0)
    _prepare(coord, bound, "b", 0)
    bound.close()  # the driver dies before the decision

    shrunk = _bound(_pipeline(["a"]))
    assert "b" in shrunk.stores, "the database of the removed sink is still visited"
    report = Coordinator(shrunk.pipeline, 2, shrunk.control, shrunk.stores).startup()
    assert len(report.rolled_back) == 2 and report.left == 0
    assert _prepared_left(databases["B"]) == 0


def test_an_explicit_control_database_holds_the_fence_and_the_decisions(
    databases: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSN_CONTROL", databases["C"])
    bound = _bound(_pipeline(["a", "b"], control="DSN_CONTROL"))
    assert bound.control.dsn == databases["C"]
    coord = Coordinator(bound.pipeline, 1, bound.control, bound.stores)
    coord.startup()
    assert coord.begin(QUERY, 0, harness.offsets(0)) is None
    prepared = [_prepare(coord, bound, "a", 0), _prepare(coord, bound, "b", 0)]
    coord.decide_and_commit(QUERY, 0, prepared, harness.offsets(0), 0.0)
    control = control_store(databases["C"])
    assert [d.batch_id for d in control.recent_decisions(bound.pipeline)] == [0]
    control.close()
    # Reordering the sinks is harmless now: the control database did not move.
    _bound(_pipeline(["b", "a"], control="DSN_CONTROL")).close()
