"""Accumulate participants: each batch's sums per key are added onto the stored totals, once."""

from __future__ import annotations

from decimal import Decimal

import psycopg
import pytest

from eo_jobs.protocol.control import ensure_schema
from eo_jobs.protocol.coordinator import Prepared
from eo_jobs.sinks.postgres.writer import PostgresWriter, rows_feed
from tests.protocol import harness

COLUMNS = ("merchant", "day", "volume_cents", "payments")


def _totals(dsn: str, volume_type: str = "numeric(20,0)") -> PostgresWriter:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE public.totals (merchant text, day date, volume_cents {volume_type}, "
            "payments bigint, updated_at timestamptz NOT NULL DEFAULT now(), "
            "PRIMARY KEY (merchant, day))"
        )
        ensure_schema(conn)  # markers and the staging tables live in schema eo
    return PostgresWriter(
        dsn=dsn,
        table="public.totals",
        columns=COLUMNS,
        mode="accumulate",
        key_columns=("merchant", "day"),
        add_columns=("volume_cents", "payments"),
    )


def _stored(dsn: str) -> dict[tuple[str, str], tuple[object, object]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT merchant, day::text, volume_cents, payments FROM totals"
        ).fetchall()
    return {(r[0], r[1]): (r[2], r[3]) for r in rows}


def test_a_batch_adds_its_sums_per_key_onto_the_stored_row_or_creates_it(pg_dsn: str) -> None:
    writer = _totals(pg_dsn)
    first = [("m1", "2026-11-28", 100, 1), ("m1", "2026-11-28", 250, 1), ("m2", "2026-11-28", 7, 1)]
    keys = writer.write(first, gid=None, pipeline="p", batch_id=0)
    writer.write(
        [("m1", "2026-11-28", 50, 1), ("m3", "2026-11-29", 1, 1)],
        gid=None,
        pipeline="p",
        batch_id=1,
    )

    assert keys == 2  # the statement's count is of keys written, not of input rows
    assert _stored(pg_dsn) == {
        ("m1", "2026-11-28"): (Decimal(400), 3),
        ("m2", "2026-11-28"): (Decimal(7), 1),
        ("m3", "2026-11-29"): (Decimal(1), 1),
    }


def test_a_stored_null_total_counts_as_zero(pg_dsn: str) -> None:
    writer = _totals(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO totals (merchant, day) VALUES ('m1', '2026-11-28')")
    writer.write([("m1", "2026-11-28", 5, 1)], gid=None, pipeline="p", batch_id=0)
    assert _stored(pg_dsn) == {("m1", "2026-11-28"): (Decimal(5), 1)}


def test_sums_beyond_bigint_stay_exact_in_numeric(pg_dsn: str) -> None:
    writer = _totals(pg_dsn)
    big = 9_000_000_000_000_000_000  # near bigint's limit: two of them overflow it
    writer.write([("m", "2026-01-01", big, 1)] * 2, gid=None, pipeline="p", batch_id=0)
    writer.write([("m", "2026-01-01", big, 1)], gid=None, pipeline="p", batch_id=1)
    assert _stored(pg_dsn) == {("m", "2026-01-01"): (Decimal(3 * big), 3)}


def test_pieces_of_one_task_add_up_as_the_whole_would(pg_dsn: str) -> None:
    """The refusal path writes a task's rows in pieces (``refusals.isolate``): each piece is
    merged on its own, so a key in two pieces must add twice, not be replaced."""
    writer = _totals(pg_dsn)
    with psycopg.connect(pg_dsn) as conn:
        writer.begin(conn)
        pieces = writer.pieces(conn)
        pieces.write(rows_feed([("m1", "2026-11-28", 10, 1), ("m2", "2026-11-28", 1, 1)]))
        pieces.write(rows_feed([("m1", "2026-11-28", 32, 1)]))
        pieces.close()
        conn.commit()
    assert _stored(pg_dsn) == {
        ("m1", "2026-11-28"): (Decimal(42), 2),
        ("m2", "2026-11-28"): (Decimal(1), 1),
    }


def test_a_decided_batch_replayed_by_a_new_epoch_adds_nothing_more(pg_dsn: str) -> None:
    writer = _totals(pg_dsn)
    coord = harness.coordinator(pg_dsn, 1)
    coord.startup()
    rows = [(f"m{i % 3}", "2026-11-28", i, 1) for i in range(30)]
    assert coord.begin(harness.QUERY, 0, {"b": 0}) is None
    gid = coord.gid(harness.QUERY, harness.SINK, 0, 0, 0)
    count = writer.write(rows, gid=gid, pipeline=harness.PIPELINE, batch_id=0)
    coord.decide_and_commit(harness.QUERY, 0, [Prepared(harness.SINK, gid, count)], {"b": 0}, 0.0)
    once = _stored(pg_dsn)

    again = harness.coordinator(pg_dsn, 2)
    again.startup()
    assert again.begin(harness.QUERY, 0, {"b": 0}) is not None  # decided: not written again
    assert _stored(pg_dsn) == once
    assert once[("m0", "2026-11-28")] == (Decimal(sum(range(0, 30, 3))), 10)


def test_an_undecided_prepared_batch_rolled_back_adds_nothing(pg_dsn: str) -> None:
    writer = _totals(pg_dsn)
    coord = harness.coordinator(pg_dsn, 1)
    coord.startup()
    assert coord.begin(harness.QUERY, 0, {"b": 0}) is None
    gid = coord.gid(harness.QUERY, harness.SINK, 0, 0, 0)
    writer.write([("m", "2026-11-28", 5, 1)], gid=gid, pipeline=harness.PIPELINE, batch_id=0)
    # The driver dies before the decision: the next epoch rolls the participant back.
    harness.coordinator(pg_dsn, 2).startup()
    assert _stored(pg_dsn) == {}


@pytest.mark.parametrize(
    ("columns", "adds", "named"),
    [
        (("merchant", "day", "volume_cents", "payments", "note"), ("volume_cents",), "note"),
        (("merchant", "day", "volume_cents"), (), "addColumns []"),
    ],
)
def test_a_writer_of_other_columns_than_keys_and_addends_is_refused(
    columns: tuple[str, ...], adds: tuple[str, ...], named: str
) -> None:
    with pytest.raises(ValueError, match="accumulate writes its key and add columns only") as e:
        PostgresWriter(
            dsn="",
            table="public.totals",
            columns=columns,
            mode="accumulate",
            key_columns=("merchant", "day"),
            add_columns=adds,
        )
    assert named in str(e.value)
