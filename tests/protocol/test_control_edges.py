"""Small edges of the control tables: the fence race report, durable decisions."""

from __future__ import annotations

import threading

import psycopg

from eo_jobs.protocol.control import ControlStore, FenceChange
from eo_jobs.protocol.errors import FenceRegressionError
from tests.protocol import harness


def test_two_first_fence_raises_report_the_fence_that_won(pg_dsn: str) -> None:
    ControlStore(pg_dsn).ensure_schema()
    for trial in range(30):
        pipeline = f"race/{trial}"
        results: dict[int, FenceChange | FenceRegressionError] = {}
        start = threading.Barrier(2)

        def raise_to(
            epoch: int,
            pipeline: str = pipeline,
            start: threading.Barrier = start,
            results: dict[int, FenceChange | FenceRegressionError] = results,
        ) -> None:
            store = ControlStore(pg_dsn)
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
        assert ControlStore(pg_dsn).fence_epoch(pipeline) == 7
        assert results[7] in (FenceChange(None, 7), FenceChange(5, 7)), results
        low = results[5]
        # The lower raise either went first (and 7 then reports 5 as its previous fence) or
        # lost and says so; it never reports 5 as the fence while 7 holds it.
        if isinstance(low, FenceChange):
            assert low == FenceChange(None, 5) and results[7] == FenceChange(5, 7), results
        else:
            assert low.current == 7, results


def test_a_decision_is_committed_synchronously_even_where_the_default_is_async(
    pg_dsn: str,
) -> None:
    dbname = psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{dbname}" SET synchronous_commit = off')
    coord = harness.coordinator(pg_dsn, 1)
    harness.create_table(pg_dsn)
    coord.startup()
    _note_synchronous_commit(pg_dsn, "INSERT")
    harness.run_batch(coord, pg_dsn, 0)
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT setting FROM public.seen").fetchall() == [("on",)]


def _note_synchronous_commit(dsn: str, event: str) -> None:
    """A trigger on eo.decisions notes the ``synchronous_commit`` of every ``event`` on it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS public.seen (setting text)")
        conn.execute(
            """CREATE OR REPLACE FUNCTION public.note() RETURNS trigger LANGUAGE plpgsql AS $$
               BEGIN INSERT INTO public.seen VALUES (current_setting('synchronous_commit'));
               RETURN NEW; END $$"""
        )
        conn.execute(
            f"CREATE TRIGGER note_{event.lower()} AFTER {event} ON eo.decisions FOR EACH ROW "
            "EXECUTE FUNCTION public.note()"
        )


def test_the_phase_2_mark_is_committed_without_waiting_for_a_flush_and_the_decision_is_not(
    pg_dsn: str,
) -> None:
    coord = harness.coordinator(pg_dsn, 1)
    harness.create_table(pg_dsn)
    coord.startup()
    _note_synchronous_commit(pg_dsn, "INSERT")
    _note_synchronous_commit(pg_dsn, "UPDATE")

    harness.run_batch(coord, pg_dsn, 0)

    with psycopg.connect(pg_dsn) as conn:
        seen = conn.execute("SELECT setting FROM public.seen").fetchall()
        marked = conn.execute(
            "SELECT committed_at IS NOT NULL FROM eo.decisions WHERE batch_id = 0"
        ).fetchone()
    # The decision (INSERT) waits for its flush; the mark (UPDATE) does not, and is there.
    assert seen == [("on",), ("off",)]
    assert marked == (True,)
