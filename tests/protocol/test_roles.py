"""Two sinks in one database under two roles: each prepared transaction is finished by its own.

PostgreSQL lets only the role that prepared a transaction (or a superuser) finish it; recovery,
the sweep and a batch's clean-up list every prepared transaction of the pipeline in the
database, so they must finish each one through the store of its own sink.
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from eo_jobs.protocol.control import ControlStore
from eo_jobs.protocol.coordinator import Coordinator, Prepared
from eo_jobs.protocol.recovery import sweep
from eo_jobs.protocol.xa import PreparedTransactions
from tests.protocol import harness

SINKS = ("orders", "audit")


@pytest.fixture
def role_dsns(pg_dsn: str) -> dict[str, str]:
    """A LOGIN role per sink (documented grants only), both on the same database."""
    harness.create_table(pg_dsn)
    ControlStore(pg_dsn).ensure_schema()
    base = psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"]
    dsns: dict[str, str] = {}
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for sink in SINKS:
            role = sql.Identifier(f"{sink}_{base}")
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(role))
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA eo TO {}").format(role))
            conn.execute(
                sql.SQL(
                    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA eo TO {}"
                ).format(role)
            )
            conn.execute(sql.SQL("GRANT USAGE ON ALL SEQUENCES IN SCHEMA eo TO {}").format(role))
            conn.execute(sql.SQL("GRANT SELECT, INSERT ON public.ledger TO {}").format(role))
            dsns[sink] = psycopg.conninfo.make_conninfo(pg_dsn, user=f"{sink}_{base}")
    return dsns


def _coordinator(dsns: dict[str, str], epoch: int) -> Coordinator:
    stores = {sink: PreparedTransactions(dsn) for sink, dsn in dsns.items()}
    return Coordinator(harness.PIPELINE, epoch, ControlStore(dsns["orders"]), stores)


def _prepare_both(coord: Coordinator, dsns: dict[str, str], batch: int) -> list[Prepared]:
    prepared = []
    for sink, dsn in dsns.items():
        gid = coord.gid(harness.QUERY, sink, batch, 0, 0)
        rows = [(batch * 1000 + i, batch, 1, 0) for i in range(10)] if sink == "orders" else []
        count = harness.writer(dsn).write(rows, gid=gid, pipeline=coord.pipeline, batch_id=batch)
        prepared.append(Prepared(sink, gid, count))
    return prepared


def test_recovery_finishes_each_roles_prepared_transactions_through_its_own_sink(
    role_dsns: dict[str, str],
) -> None:
    first = _coordinator(role_dsns, 1)
    first.startup()
    assert first.begin(harness.QUERY, 0, harness.offsets(0)) is None
    decided = first.decide(harness.QUERY, 0, _prepare_both(first, role_dsns, 0), None, 0.0)
    # A writer of batch 1 raced ahead of phase 2 of batch 0; then the driver died.
    _prepare_both(first, role_dsns, 1)

    report = _coordinator(role_dsns, 2).startup()
    assert sorted(report.committed) == sorted(p.gid for p in decided.winners)
    assert len(report.rolled_back) == 2 and report.left == 0


def test_the_sweep_and_a_batch_start_finish_another_roles_leftovers(
    role_dsns: dict[str, str],
) -> None:
    zombie = _coordinator(role_dsns, 1)
    zombie.startup()
    live = _coordinator(role_dsns, 2)
    live.startup()
    _prepare_both(zombie, role_dsns, 0)  # a zombie's late prepares, below the fence
    swept = sweep(live.control, live.stores, harness.PIPELINE)
    assert len(swept.rolled_back) == 2 and swept.left == 0

    _prepare_both(live, role_dsns, 0)  # the live driver's own earlier attempt of batch 0
    assert live.begin(harness.QUERY, 0, harness.offsets(0)) is None
    result = live.decide_and_commit(harness.QUERY, 0, _prepare_both(live, role_dsns, 0), None, 0.0)
    assert result.rows_by_sink == {"orders": 10, "audit": 0}
