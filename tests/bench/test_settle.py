"""Every measured run starts from a server with nothing left to flush of the run before it."""

from __future__ import annotations

from pathlib import Path

import psycopg

from bench import compare, copy_ceiling, variants
from eo_jobs.pgserver import PgServer, temporary_server


def _lsn(server: PgServer, query: str) -> int:
    with psycopg.connect(server.dsn()) as conn:
        row = conn.execute(f"SELECT ({query}) - '0/0'::pg_lsn").fetchone()
    assert row is not None
    return int(row[0])


def test_a_run_starts_after_a_checkpoint_of_what_the_runs_before_it_wrote(tmp_path: Path) -> None:
    csv = copy_ceiling.write_csv(tmp_path / "events.csv", 2, 1_000)
    size = compare.Size("tiny", 1_000, 2, 1_000)
    shape = variants.Shape(tmp_path / "in", 1, 1, 1, "512m")
    copy = variants.BY_NAME["copy"]
    with temporary_server() as server:
        compare.measure(server, copy, size, shape, tmp_path / "a", csv, 60)
        written = _lsn(server, "pg_current_wal_lsn()")
        second = compare.measure(server, copy, size, shape, tmp_path / "b", csv, 60)
        redo = _lsn(server, "SELECT redo_lsn FROM pg_control_checkpoint()")
    assert second.code == 0 and second.audit is not None and second.audit.exact
    assert redo >= written, "the second run began before the first run's WAL was checkpointed"
