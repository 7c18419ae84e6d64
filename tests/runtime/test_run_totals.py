"""Running totals end to end: a ledger sink and an accumulate sink of per-merchant totals, killed
at every crash point in turn; the totals end equal to the ledger's and to the source's."""

from __future__ import annotations

import signal
from collections import Counter
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from tests.runtime import harness

from eo_jobs.protocol.faults import POINTS

pytestmark = pytest.mark.spark

TOTALS_DDL = (
    "CREATE TABLE public.merchant_totals (merchant text PRIMARY KEY, "
    "volume_cents numeric(20, 0) NOT NULL, orders bigint NOT NULL)"
)
TOTALS_SINK = """\
    - name: totals
      transform: {sql: "SELECT merchant, CAST(sum(amount_cents) AS DECIMAL(20, 0)) AS volume_cents,
                        count(*) AS orders FROM source GROUP BY merchant"}
      postgres: {dsn: {env: TEST_DSN}, table: public.merchant_totals, mode: accumulate,
                 keyColumns: [merchant], addColumns: [volume_cents, orders],
                 sumColumns: [volume_cents, orders]}
"""


def _recorded_sums(dsn: str) -> dict[str, Counter[str]]:
    """Per sink and column, the sums every decision recorded, added up over the batches."""
    added: dict[str, Counter[str]] = {}
    with psycopg.connect(dsn) as conn:
        for (sums,) in conn.execute("SELECT sums FROM eo.decisions ORDER BY batch_id"):
            assert sums is not None  # every batch of a pipeline with sum columns records them
            for sink, columns in sums.items():
                assert columns is not None, sums  # nothing refused here: always comparable
                for column, text in columns.items():
                    added.setdefault(sink, Counter())[column] += Decimal(text)
    return added


def _totals(dsn: str, query: str) -> dict[str, tuple[Decimal, int]]:
    with psycopg.connect(dsn) as conn:
        return {r[0]: (Decimal(r[1]), int(r[2])) for r in conn.execute(query).fetchall()}


def test_every_crash_point_in_turn_leaves_totals_equal_to_the_ledger_and_the_source(
    tmp_path: Path, pg_dsn: str
) -> None:
    """One driver per crash point, each killed at it in a later batch (epoch e at batch e), the
    next one recovering with a higher epoch; then a clean driver runs the stream to its end."""
    harness.create_table(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(TOTALS_DDL)
    batches = len(POINTS) + 2
    truth = harness.write_files(tmp_path / "in", files=2 * batches, per_file=30)
    spec = harness.files_pipeline(
        tmp_path, more_sinks=TOTALS_SINK, orders_options=", sumColumns: [amount_cents]"
    )

    for epoch, point in enumerate(POINTS, start=1):
        fault = {"EO_FAULT_POINT": point, "EO_FAULT_BATCH": str(epoch)}
        code, out = harness.run(spec, epoch, pg_dsn, extra_env=fault)
        assert code == -signal.SIGKILL, f"{point}: {out}"
        if point == "after-commits":  # the brief's point: all commits, before Spark's commit log
            assert not (tmp_path / "checkpoint" / "commits" / str(epoch)).exists(), out
    code, out = harness.run(spec, len(POINTS) + 1, pg_dsn)
    assert code == 0, out

    harness.assert_exact(pg_dsn, truth)
    merchants: Counter[str] = Counter()
    volumes: Counter[str] = Counter()
    for order_id, amount in truth.valid.items():
        merchants[f"m{order_id % 5}"] += 1
        volumes[f"m{order_id % 5}"] += amount
    source = {m: (Decimal(volumes[m]), merchants[m]) for m in merchants}
    ledger = _totals(
        pg_dsn, "SELECT merchant, sum(amount_cents), count(*) FROM orders GROUP BY merchant"
    )
    totals = _totals(pg_dsn, "SELECT merchant, volume_cents, orders FROM merchant_totals")
    assert totals == ledger == source
    # Each decision recorded its batch's sums once: added up, they are the tables' and the
    # source's, through every kill and replay (a batch decided once is summed once).
    recorded = _recorded_sums(pg_dsn)
    assert recorded["orders"] == {"amount_cents": sum(truth.valid.values())}
    assert recorded["totals"] == {
        "volume_cents": sum(v for v, _ in totals.values()),
        "orders": len(truth.valid),
    }
