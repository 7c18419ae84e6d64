"""Connections that die or hang: a restart between two calls, a frozen lock holder."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest

from eo_jobs.pgserver import temporary_server
from eo_jobs.protocol.control import STUCK_HOLDER_SECONDS, ControlStore
from eo_jobs.protocol.xa import Outcome, PreparedTransactions
from tests.protocol import harness


def test_a_postgres_restart_between_two_calls_costs_the_driver_nothing(tmp_path: Path) -> None:
    with temporary_server(settings={"max_prepared_transactions": "8"}) as server:
        dsn = server.create_database("restart")
        harness.create_table(dsn)
        coord = harness.coordinator(dsn, 1)
        coord.startup()
        assert coord.begin(harness.QUERY, 0, harness.offsets(0)) is None
        prepared = [harness.prepare_task(coord, dsn, 0, 0, harness.batch_rows(0))]
        decided = coord.decide(harness.QUERY, 0, prepared, harness.offsets(0), 0.0)
        server.restart("immediate")  # the idle connections of both stores are now dead
        assert coord.control.fence_epoch(harness.PIPELINE) == 1
        store = coord.stores[harness.SINK]
        assert store.commit(decided.winners[0].gid) == Outcome.COMMITTED
        server.restart("fast")
        assert store.in_doubt("eo1:") == []
        assert coord.control.decision(harness.PIPELINE, harness.QUERY, 0) is not None


def test_a_server_still_restarting_when_the_next_call_comes_is_waited_for(
    tmp_path: Path,
) -> None:
    with temporary_server(settings={"max_prepared_transactions": "8"}) as server:
        dsn = server.create_database("restarting")
        control = ControlStore(dsn)
        control.ensure_schema()
        control.raise_fence(harness.PIPELINE, 1)
        store = PreparedTransactions(dsn)
        assert store.in_doubt("eo1:") == []
        server.stop("immediate")  # a crash; it is back only after a failover's few seconds
        back = threading.Timer(3.0, server.start)
        back.start()
        try:
            started = time.monotonic()
            assert control.fence_epoch(harness.PIPELINE) == 1
            assert store.in_doubt("eo1:") == []
            assert time.monotonic() - started >= 2.5
        finally:
            back.join()


def test_a_frozen_decision_holding_the_fence_row_does_not_block_the_next_epoch(
    pg_dsn: str,
) -> None:
    control = ControlStore(pg_dsn)
    control.ensure_schema()
    control.raise_fence(harness.PIPELINE, 1)
    frozen = psycopg.connect(pg_dsn)  # a driver frozen inside its decision transaction
    frozen.execute(
        "UPDATE eo.fence SET updated_at = clock_timestamp() WHERE pipeline = %s AND epoch = 1",
        (harness.PIPELINE,),
    )
    started = time.monotonic()
    change = ControlStore(pg_dsn).raise_fence(harness.PIPELINE, 2)
    waited = time.monotonic() - started
    assert (change.previous, change.current) == (1, 2)
    assert STUCK_HOLDER_SECONDS <= waited < STUCK_HOLDER_SECONDS + 5, waited
    with pytest.raises(psycopg.OperationalError):
        frozen.execute("COMMIT")
    assert frozen.broken


def test_every_store_connection_has_keepalives_and_its_lock_and_statement_timeouts(
    pg_dsn: str,
) -> None:
    given = psycopg.conninfo.make_conninfo(pg_dsn, options="-c application_name=given")
    stores = (
        ControlStore(given, lock_timeout_ms=1234, statement_timeout_ms=5678),
        PreparedTransactions(given, lock_timeout_ms=1234, statement_timeout_ms=5678),
    )
    for store in stores:
        conn = store.connection()
        settings = conn.execute(
            "SELECT current_setting('lock_timeout'), current_setting('statement_timeout'), "
            "current_setting('application_name')"
        ).fetchone()
        assert settings == ("1234ms", "5678ms", "given")
        params = conn.info.get_parameters()
        assert params["keepalives"] == "1"
        assert int(params["keepalives_idle"]) + 3 * int(params["keepalives_interval"]) <= 120
        store.close()


def test_a_writer_tasks_connection_has_keepalives_too(pg_dsn: str) -> None:
    harness.create_table(pg_dsn)
    seen: dict[str, str] = {}

    def body(conn: psycopg.Connection[tuple[object, ...]]) -> int:
        seen.update(conn.info.get_parameters())
        return 0

    harness.writer(pg_dsn).write_with(body, gid=None, pipeline=harness.PIPELINE, batch_id=0)
    assert (seen.get("keepalives"), seen.get("keepalives_idle")) == ("1", "30")


def _decide(control: ControlStore, batch_id: int) -> float:
    return control.decide(
        pipeline=harness.PIPELINE,
        query_id=harness.QUERY,
        batch_id=batch_id,
        epoch=1,
        participants=["eo1:x"],
        source_offsets=None,
        rows_written=1,
        prepare_ms=0.0,
    )


def _terminate(dsn: str, control: ControlStore) -> None:
    pid = control.connection().info.backend_pid
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def _decisions(dsn: str) -> list[tuple[int, int]]:
    with psycopg.connect(dsn) as conn:
        return [
            (int(b), int(e))
            for b, e in conn.execute("SELECT batch_id, epoch FROM eo.decisions").fetchall()
        ]


def test_a_decision_on_an_idle_connection_the_server_ended_is_still_written(pg_dsn: str) -> None:
    control = ControlStore(pg_dsn)
    control.ensure_schema()
    control.raise_fence(harness.PIPELINE, 1)
    _terminate(pg_dsn, control)  # an idle timeout, a proxy, pg_terminate_backend

    _decide(control, 0)

    assert _decisions(pg_dsn) == [(0, 1)]


def test_a_decision_whose_first_try_committed_is_found_not_written_twice(pg_dsn: str) -> None:
    control = ControlStore(pg_dsn)
    control.ensure_schema()
    control.raise_fence(harness.PIPELINE, 1)
    _decide(ControlStore(pg_dsn), 0)  # what the first try left: committed, reply lost
    _terminate(pg_dsn, control)

    _decide(control, 0)

    assert _decisions(pg_dsn) == [(0, 1)]
