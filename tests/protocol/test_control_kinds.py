"""The control store behaves the same in PostgreSQL and in MySQL/MariaDB (``control_dsn``).

Every test runs against both kinds on real servers; the raw SQL a test needs to play a frozen
driver is the only kind-specific part (``_hold_fence_row``, ``_kill``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pymysql
import pytest

from eo_jobs.protocol import control as pg_control
from eo_jobs.protocol import mysql_control, mysql_xa
from eo_jobs.protocol.control import FenceTakenError, ForeignFenceOwnerError
from eo_jobs.protocol.control_api import ControlDatabase, FenceChange
from eo_jobs.protocol.databases import control_store, kind
from eo_jobs.protocol.errors import FencedError, FenceRegressionError

PIPELINE = "ns/kinds"
QUERY = "7b0b5fb2-1c1e-4b7e-9d7e-0d6f2b0b0b0b"


def _decide(store: ControlDatabase, batch: int, epoch: int = 1, **extra: Any) -> float:
    return store.decide(
        pipeline=PIPELINE,
        query_id=QUERY,
        batch_id=batch,
        epoch=epoch,
        participants=[f"eo1:p:{batch}:a", f"eo1:p:{batch}:b"],
        source_offsets={"topic": {"0": batch}},
        rows_written=10 * batch,
        prepare_ms=1.5,
        **extra,
    )


@contextmanager
def _hold_fence_row(dsn: str, pipeline: str) -> Iterator[Any]:
    """A driver frozen inside its decision transaction: the fence row stays locked."""
    if kind(dsn) == "mysql":
        conn = mysql_xa.connect(dsn, autocommit=False)
        with conn.cursor() as cur:
            cur.execute("SELECT epoch FROM eo_fence WHERE pipeline = %s FOR UPDATE", (pipeline,))
        try:
            yield conn
        finally:
            with suppress(pymysql.Error):
                conn.close()
        return
    pg = psycopg.connect(dsn)
    pg.execute("SELECT epoch FROM eo.fence WHERE pipeline = %s FOR UPDATE", (pipeline,))
    try:
        yield pg
    finally:
        pg.close()


def _commit(conn: Any) -> None:
    conn.commit()


def _kill(dsn: str, store: ControlDatabase) -> None:
    """End the store's connection from outside (an idle timeout, a proxy, a restart)."""
    if isinstance(store, mysql_control.MySqlControlStore):
        with store.connection().cursor() as cur:
            cur.execute("SELECT CONNECTION_ID()")
            row = cur.fetchone()
        assert row is not None
        with mysql_xa.connect(dsn) as conn, conn.cursor() as cur:
            cur.execute(f"KILL CONNECTION {int(row[0])}")
        return
    assert isinstance(store, pg_control.ControlStore)
    pid = store.connection().info.backend_pid
    with psycopg.connect(dsn, autocommit=True) as pg:
        pg.execute("SELECT pg_terminate_backend(%s)", (pid,))


def test_the_fence_is_raised_never_lowered_and_an_equal_raise_is_a_no_op(
    control: ControlDatabase,
) -> None:
    assert control.fence(PIPELINE) is None
    assert control.raise_fence(PIPELINE, 3) == FenceChange(None, 3)
    assert control.raise_fence(PIPELINE, 3) == FenceChange(3, 3)
    with pytest.raises(FenceRegressionError, match="2"):
        control.raise_fence(PIPELINE, 2)
    assert control.fence_epoch(PIPELINE) == 3
    with pytest.raises(ValueError, match="positive"):
        control.raise_fence(PIPELINE, 0)


def test_owner_rules_are_the_same_claim_adopt_take_and_release(control: ControlDatabase) -> None:
    assert control.raise_fence(PIPELINE, 1, "uid-a") == FenceChange(None, 1, None)
    with pytest.raises(ForeignFenceOwnerError, match="uid-a"):
        control.raise_fence(PIPELINE, 2, "uid-b")
    with pytest.raises(FenceTakenError, match="above 1"):
        control.raise_fence(PIPELINE, 1, "uid-b", adopt_from="uid-a")
    assert control.raise_fence(PIPELINE, 2, "uid-b", adopt_from="uid-a") == FenceChange(
        1, 2, "uid-a"
    )
    assert control.raise_fence(PIPELINE, 3) == FenceChange(2, 3, "uid-b")  # a bare fence
    fence = control.fence(PIPELINE)
    assert fence is not None and (fence.epoch, fence.owner) == (3, "uid-b")
    assert not control.release_fence(PIPELINE, "uid-a")
    assert control.release_fence(PIPELINE, "uid-b")
    fence = control.fence(PIPELINE)
    assert fence is not None and (fence.epoch, fence.owner) == (3, None)
    with pytest.raises(FenceTakenError):  # nobody's fence: only above it
        control.raise_fence(PIPELINE, 3, "uid-c")
    assert control.raise_fence(PIPELINE, 4, "uid-c") == FenceChange(3, 4, None)


def test_a_decision_is_written_under_its_epoch_and_refused_below_the_fence(
    control: ControlDatabase,
) -> None:
    with pytest.raises(FencedError):  # no fence row yet
        _decide(control, 0)
    control.raise_fence(PIPELINE, 1)
    _decide(control, 0, sums={"ledger": {"amount": "12.50"}, "other": None})
    control.raise_fence(PIPELINE, 2)
    with pytest.raises(FencedError, match="epoch 1 is older than the sink fence 2"):
        _decide(control, 1)
    assert control.decision(PIPELINE, QUERY, 1) is None
    found = control.decision(PIPELINE, QUERY, 0)
    assert found is not None
    assert (found.epoch, found.participants, found.rows_written) == (
        1,
        ("eo1:p:0:a", "eo1:p:0:b"),
        0,
    )
    assert found.source_offsets == {"topic": {"0": 0}}
    assert found.committed_at is None and found.prepare_ms == 1.5
    assert found.decide_ms is not None and found.decide_ms >= 0
    assert abs(found.decided_at - datetime.now(UTC)) < timedelta(minutes=1)


def test_reads_of_the_decision_log_agree_across_kinds(control: ControlDatabase) -> None:
    control.raise_fence(PIPELINE, 1)
    for batch in range(3):
        _decide(control, batch)
    control.decide(
        pipeline=PIPELINE,
        query_id="other-query",
        batch_id=9,
        epoch=1,
        participants=["x"],
        source_offsets=None,
        rows_written=1,
        prepare_ms=0.0,
    )
    assert control.queries(PIPELINE) == [(QUERY, 2), ("other-query", 9)]
    assert control.other_queries(PIPELINE, QUERY) == [("other-query", 9)]
    assert control.has_decisions(PIPELINE, QUERY)
    assert not control.has_decisions(PIPELINE, "nobody")
    assert control.winners(PIPELINE, ["eo1:p:1:a", "eo1:p:2:b", "eo1:p:7:a"], [1, 2, 7]) == {
        "eo1:p:1:a",
        "eo1:p:2:b",
    }
    assert control.winners(PIPELINE, ["eo1:p:1:a"], [2]) == set()
    assert control.winners(PIPELINE, [], [1]) == set()
    control.mark_committed(PIPELINE, QUERY, 1, 4.0)
    marked = control.decision(PIPELINE, QUERY, 1)
    assert marked is not None and marked.commit_ms == 4.0 and marked.committed_at is not None
    assert marked.checkpoint_seconds is not None
    assert [d.batch_id for d in control.recent_decisions(PIPELINE, 2)] == [9, 2]
    control.record_failure(PIPELINE, "x" * 3000, query_id=QUERY, batch_id=3, epoch=1)
    assert control.attempts_since(PIPELINE, 60) == (4, 1)
    timings = control.timings(PIPELINE, None, 3600, [])
    assert [(t.query_id, t.batch_id) for t in timings] == [
        (QUERY, 0),
        (QUERY, 1),
        (QUERY, 2),
        ("other-query", 9),
    ]
    later = max(t.decided_at for t in timings) + timedelta(seconds=1)
    assert [t.batch_id for t in control.timings(PIPELINE, later, 3600, [(QUERY, 1)])] == [1]
    assert [t.commit_ms for t in control.timings(PIPELINE, later, 3600, [(QUERY, 1)])] == [4.0]
    failures = control.failures_after(PIPELINE, None, 3600)
    assert len(failures) == 1 and failures[0][1].tzinfo is not None
    assert control.failures_after(PIPELINE, failures[0][1], 3600) == []
    assert control.forget_query(PIPELINE, QUERY) == 3
    assert control.queries(PIPELINE) == [("other-query", 9)]


def test_audit_positions_and_the_participant_registry_round_trip(
    control: ControlDatabase,
) -> None:
    assert control.audited_batch(PIPELINE, "q1") is None
    control.forget_audited(PIPELINE)  # no table yet: nothing to do
    control.record_audited(PIPELINE, {"q1": 5, "q2": 7})
    control.record_audited(PIPELINE, {"q1": 6})
    assert (control.audited_batch(PIPELINE, "q1"), control.audited_batch(PIPELINE, "q2")) == (6, 7)
    control.forget_audited(PIPELINE)
    assert control.audited_batch(PIPELINE, "q1") is None

    identity = control.identity()
    assert identity == control.identity() and len(identity) == 36
    assert control.participant_databases(PIPELINE) == []
    control.record_participant_database(PIPELINE, identity, "s1", "old", {"env": "A"})
    control.record_participant_database(PIPELINE, identity, "s1", "new", {"env": "B"})
    [recorded] = control.participant_databases(PIPELINE)
    assert (recorded.sink, recorded.database, recorded.label, recorded.dsn_ref) == (
        "s1",
        identity,
        "new",
        {"env": "B"},
    )


def test_two_first_fence_raises_are_serialised_and_report_the_fence_that_won(
    control_dsn: str, control: ControlDatabase
) -> None:
    for trial in range(60):
        pipeline = f"race/{trial}"
        results: dict[int, FenceChange | FenceRegressionError] = {}
        start = threading.Barrier(2)

        def raise_to(
            epoch: int,
            pipeline: str = pipeline,
            start: threading.Barrier = start,
            results: dict[int, FenceChange | FenceRegressionError] = results,
        ) -> None:
            store = control_store(control_dsn)
            start.wait()
            try:
                results[epoch] = store.raise_fence(pipeline, epoch)
            except FenceRegressionError as exc:
                results[epoch] = exc
            store.close()

        threads = [threading.Thread(target=raise_to, args=(e,)) for e in (5, 7)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert control.fence_epoch(pipeline) == 7
        assert results[7] in (FenceChange(None, 7), FenceChange(5, 7)), results
        low = results[5]
        if isinstance(low, FenceChange):
            assert low == FenceChange(None, 5) and results[7] == FenceChange(5, 7), results
        else:
            assert low.current == 7, results


def test_a_raise_waits_for_an_in_flight_decision_and_then_fences_it(
    control_dsn: str, control: ControlDatabase
) -> None:
    control.raise_fence(PIPELINE, 1)
    done: list[FenceChange] = []
    with _hold_fence_row(control_dsn, PIPELINE) as holder:
        raiser = threading.Thread(
            target=lambda: done.append(control_store(control_dsn).raise_fence(PIPELINE, 2))
        )
        raiser.start()
        time.sleep(1.0)
        assert done == []  # still waiting for the decision's row lock
        _commit(holder)
        raiser.join(timeout=10)
    assert done == [FenceChange(1, 2)]
    with pytest.raises(FencedError):
        _decide(control_store(control_dsn), 0, epoch=1)


def test_a_decision_waits_for_an_in_flight_raise_and_is_then_fenced(
    control_dsn: str, control: ControlDatabase
) -> None:
    control.raise_fence(PIPELINE, 1)
    outcome: list[BaseException | float] = []
    with _hold_fence_row(control_dsn, PIPELINE) as holder:
        decider = control_store(control_dsn)

        def decide() -> None:
            try:
                outcome.append(_decide(decider, 0, epoch=1))
            except FencedError as exc:
                outcome.append(exc)

        thread = threading.Thread(target=decide)
        thread.start()
        time.sleep(0.5)
        assert outcome == []
        # The holder plays a raise: it moves the fence while the decision waits.
        if kind(control_dsn) == "mysql":
            with holder.cursor() as cur:
                cur.execute("UPDATE eo_fence SET epoch = 2 WHERE pipeline = %s", (PIPELINE,))
        else:
            holder.execute("UPDATE eo.fence SET epoch = 2 WHERE pipeline = %s", (PIPELINE,))
        _commit(holder)
        thread.join(timeout=10)
    assert len(outcome) == 1 and isinstance(outcome[0], FencedError), outcome
    assert control.decision(PIPELINE, QUERY, 0) is None


def test_a_frozen_decision_holding_the_fence_row_is_ended_and_the_raise_goes_through(
    control_dsn: str, control: ControlDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_control, "STUCK_HOLDER_SECONDS", 1.0)
    monkeypatch.setattr(mysql_control, "STUCK_HOLDER_SECONDS", 1.0)
    control.raise_fence(PIPELINE, 1)
    with _hold_fence_row(control_dsn, PIPELINE) as frozen:
        started = time.monotonic()
        change = control_store(control_dsn).raise_fence(PIPELINE, 2)
        waited = time.monotonic() - started
        assert (change.previous, change.current) == (1, 2)
        assert 1.0 <= waited < 6.0, waited
        with pytest.raises((psycopg.OperationalError, pymysql.err.Error)):
            _commit(frozen)


def test_a_decision_whose_first_try_committed_is_found_not_written_twice(
    control_dsn: str, control: ControlDatabase
) -> None:
    control.raise_fence(PIPELINE, 1)
    _decide(control_store(control_dsn), 0)  # what the first try left: committed, reply lost
    _kill(control_dsn, control)

    _decide(control, 0)  # the connection is found dead; the retry finds the decision

    assert [d.batch_id for d in control.recent_decisions(PIPELINE)] == [0]


def test_a_second_decision_of_the_same_batch_on_a_live_connection_is_refused(
    control: ControlDatabase,
) -> None:
    control.raise_fence(PIPELINE, 1)
    _decide(control, 0)
    with pytest.raises((psycopg.errors.UniqueViolation, pymysql.err.IntegrityError)):
        _decide(control, 0)


def test_the_control_tables_are_reported_only_once_they_exist(control_dsn: str) -> None:
    store = control_store(control_dsn)
    try:
        if kind(control_dsn) == "mysql":  # a fresh database; PostgreSQL's may have them
            assert not store.has_control_tables()
        store.ensure_schema()
        store.ensure_schema()  # twice: nothing to do
        assert store.has_control_tables()
    finally:
        store.close()


def test_a_frozen_raise_holding_the_pipelines_named_lock_is_ended_in_mysql(
    mariadb_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mysql_control, "STUCK_HOLDER_SECONDS", 1.0)
    store = mysql_control.MySqlControlStore(mariadb_db.dsn)
    store.ensure_schema()
    store.raise_fence(PIPELINE, 1)
    frozen = mariadb_db.connect()  # a raise frozen after GET_LOCK, before its transaction
    with frozen.cursor() as cur:
        cur.execute(
            "SELECT GET_LOCK(%s, 0)",
            (mysql_control.fence_lock_name(mariadb_db.name, PIPELINE),),
        )
        assert cur.fetchone() == (1,)
    started = time.monotonic()
    assert store.raise_fence(PIPELINE, 2) == FenceChange(1, 2)
    assert 1.0 <= time.monotonic() - started < 6.0
    with pytest.raises(pymysql.err.OperationalError):
        frozen.cursor().execute("SELECT 1")
    store.close()
