"""A checkpoint ahead of the decision log is refused at start-up (exit 76), in every mode.

Spark commits a batch only after its decision (or, without two-phase commit, its record) is
durable, so the control database must hold Spark's latest committed batch. A single-sink
pipeline whose DSN now names an empty database (or a control database restored from a backup)
does not: running on would resume from the checkpoint with nothing deciding what it skipped.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from tests.runtime import harness

from eo_jobs.pgserver import PgServer
from eo_jobs.protocol.errors import EXIT_CHECKPOINT_RESET

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_a_sink_re_pointed_at_an_empty_database_is_refused_with_exit_76(
    tmp_path: Path, pg_dsn: str, pg_server: PgServer, guarantee: str
) -> None:
    harness.create_table(pg_dsn)
    truth = harness.write_files(tmp_path / "in", files=2, per_file=40)
    spec = harness.files_pipeline(tmp_path, per_trigger=1, guarantee=guarantee)
    code, out = harness.run(spec, 1, pg_dsn)
    assert code == 0, out
    assert (tmp_path / "checkpoint" / "commits" / "1").is_file(), out

    empty = pg_server.create_database(
        f"{psycopg.conninfo.conninfo_to_dict(pg_dsn)['dbname']}_empty"
    )
    harness.create_table(empty)
    more = harness.write_files(tmp_path / "in", files=1, per_file=40, start=1000)
    code, out = harness.run(spec, 2, empty)

    assert code == EXIT_CHECKPOINT_RESET, out
    assert "checkpoint ahead of the decision log" in out and "batch 1" in out, out
    with psycopg.connect(empty) as conn:
        assert conn.execute("SELECT count(*) FROM public.orders").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM eo.fence").fetchone() == (0,)  # not fenced

    # Pointed back at the database that decided those batches, it goes on exactly.
    truth.valid.update(more.valid)
    truth.malformed += more.malformed
    code, out = harness.run(spec, 3, pg_dsn)
    assert code == 0, out
    harness.assert_exact(pg_dsn, truth)
