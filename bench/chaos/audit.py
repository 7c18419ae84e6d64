"""What must hold after any number of faults: every valid record exactly once in every sink,
per-merchant sums equal, dead letters exactly once, nothing left prepared, epochs increasing,
no batch decided twice. Each check counts its violations separately."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from typing import Any

import psycopg

from bench.chaos.stream import Truth
from eo_jobs.protocol import databases
from eo_jobs.protocol.gid import pipeline_prefix
from eo_jobs.protocol.mysql_xa import MySqlPreparedTransactions, connect

PIPELINE = "chaos/orders"
TOTALS_DDL = (
    "CREATE TABLE public.merchant_totals (merchant text PRIMARY KEY, "
    "volume_cents numeric(20, 0) NOT NULL, orders bigint NOT NULL)"
)
"""The accumulate sink's table: per-merchant running totals (issue 30)."""
TOTALS_SQL = (
    "SELECT merchant, CAST(sum(amount_cents) AS DECIMAL(20, 0)) AS volume_cents, "
    "count(*) AS orders FROM source GROUP BY merchant"
)
"""The accumulate sink's own query over the pipeline's rows of a batch."""


@dataclass(frozen=True)
class Findings:
    """Counts; every one but ``rows``/``dead_letters``/``batches`` must be zero."""

    rows: int
    batches: int
    dead_letters: int
    duplicates: int
    missing: int
    unexpected: int
    wrong_values: int
    sum_mismatches: int
    latest_wrong: int
    totals_wrong: int
    """Merchants whose running total (sum and count) differs from the source's."""
    dead_letter_duplicates: int
    dead_letters_missing: int
    prepared_left: int
    epoch_regressions: int
    batches_decided_twice: int

    def violations(self) -> dict[str, int]:
        """The non-zero violation counts by name."""
        skip = {"rows", "batches", "dead_letters"}
        return {k: v for k, v in self.__dict__.items() if k not in skip and v}


def rows_of(dsn: str, query: str) -> list[tuple[Any, ...]]:
    """The rows of ``query`` (``{t}`` before each table name: ``public.`` in PostgreSQL, the
    DSN's own database in MySQL/MariaDB) from the sink database ``dsn`` names."""
    if databases.kind(dsn) == "mysql":
        conn = connect(dsn)
        try:
            with conn.cursor() as cur:
                cur.execute(query.format(t=""))
                return list(cur.fetchall())
        finally:
            conn.close()
    with psycopg.connect(dsn) as pg:
        return list(pg.execute(query.format(t="public.")).fetchall())


def mysql_prepared_left(dsn: str) -> int:
    """eo's branches of the pipeline still prepared in the MySQL/MariaDB database of ``dsn``."""
    store = MySqlPreparedTransactions(dsn)
    try:
        return len(store.in_doubt(pipeline_prefix(PIPELINE)))
    finally:
        store.close()


def duplicates_so_far(dsn: str) -> int:
    """Rows of the append sink beyond the first of each order id (cheap, during the run)."""
    rows = rows_of(dsn, "SELECT count(*) - count(DISTINCT order_id) FROM {t}ledger")
    return int(rows[0][0]) if rows else 0


def delivered(dsn: str) -> int:
    """Distinct order ids in the append sink."""
    rows = rows_of(dsn, "SELECT count(DISTINCT order_id) FROM {t}ledger")
    return int(rows[0][0]) if rows else 0


def last_batch(dsn: str) -> int:
    """The highest decided batch id (-1 before the first decision)."""
    with psycopg.connect(dsn) as conn:
        try:
            row = conn.execute(
                "SELECT coalesce(max(batch_id), -1) FROM eo.decisions WHERE pipeline = %s",
                (PIPELINE,),
            ).fetchone()
        except psycopg.errors.UndefinedTable:  # no driver has started yet
            return -1
    return int(row[0]) if row else -1


def decided_batches(dsn: str) -> list[int]:
    """Every batch id in the decisions table, once per decision: a batch decided twice (under
    another query id, the table's key being pipeline, query id and batch id) shows twice.
    Where the harness does not read the drivers' own reports (the operator mode)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT batch_id FROM eo.decisions WHERE pipeline = %s", (PIPELINE,)
        ).fetchall()
    return [int(r[0]) for r in rows]


def audit(
    dsn: str, truth: Truth, decided_by_drivers: list[int], rows_dsn: str | None = None
) -> Findings:
    """The whole audit; ``decided_by_drivers`` is every batch id any driver reported deciding.
    ``rows_dsn``: where the ledger, the latest table and the dead letters are, when not in the
    control database ``dsn`` (a MySQL/MariaDB one: ``--sink mysql``)."""
    rows_at = rows_dsn or dsn
    ledger = rows_of(rows_at, "SELECT order_id, merchant, amount_cents FROM {t}ledger")
    latest = rows_of(rows_at, "SELECT order_id, merchant, amount_cents FROM {t}latest")
    dead = [str(r[0]) for r in rows_of(rows_at, "SELECT raw FROM {t}ledger_dead_letter")]
    mysql_left = mysql_prepared_left(rows_at) if databases.kind(rows_at) == "mysql" else 0
    with psycopg.connect(dsn) as conn:
        totals = {
            r[0]: (int(r[1]), int(r[2]))
            for r in conn.execute(
                "SELECT merchant, volume_cents, orders FROM public.merchant_totals"
            ).fetchall()
        }
        left = conn.execute(
            "SELECT count(*) FROM pg_prepared_xacts WHERE starts_with(gid, %s)",
            (pipeline_prefix(PIPELINE),),
        ).fetchone()
        decisions = conn.execute(
            "SELECT batch_id, epoch FROM eo.decisions WHERE pipeline = %s ORDER BY batch_id",
            (PIPELINE,),
        ).fetchall()
    counts = Counter(r[0] for r in ledger)
    values = {r[0]: (r[1], r[2]) for r in ledger}
    sink_sums: Counter[str] = Counter()
    for order_id, (merchant, amount) in values.items():
        sink_sums[merchant] += amount * counts[order_id]
    source_sums: Counter[str] = Counter()
    source_counts: Counter[str] = Counter()
    for merchant, amount in truth.valid.values():
        source_sums[merchant] += amount
        source_counts[merchant] += 1
    source_totals = {m: (source_sums[m], source_counts[m]) for m in source_counts}
    latest_values = {r[0]: (r[1], r[2]) for r in latest}
    dead_counts = Counter(dead)
    epochs = [int(e) for _, e in decisions]
    reported = Counter(decided_by_drivers)
    return Findings(
        rows=len(ledger),
        batches=len(decisions),
        dead_letters=len(dead),
        duplicates=sum(c - 1 for c in counts.values()),
        missing=sum(1 for oid in truth.valid if oid not in counts),
        unexpected=sum(1 for oid in counts if oid not in truth.valid),
        wrong_values=sum(1 for oid, v in values.items() if truth.valid.get(oid, v) != v),
        sum_mismatches=sum(1 for m in source_sums | sink_sums if source_sums[m] != sink_sums[m]),
        latest_wrong=len(latest_values.items() ^ truth.valid.items()),
        totals_wrong=len({m for m, _ in totals.items() ^ source_totals.items()}),
        dead_letter_duplicates=sum(c - 1 for c in dead_counts.values()),
        dead_letters_missing=len(truth.malformed - {raw.rstrip("\n") for raw in dead_counts}),
        prepared_left=int(left[0]) + mysql_left if left else -1,
        epoch_regressions=sum(1 for a, b in itertools.pairwise(epochs) if b < a),
        batches_decided_twice=sum(c - 1 for c in reported.values()),
    )
