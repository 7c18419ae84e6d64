"""A writer-task attempt that PREPAREs after its batch was decided without it is rolled back
while the stream is idle, not left holding its locks until the next batch (a real driver)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import psycopg
import pytest
from tests.runtime import harness
from tests.support.postgres import PREPARED_HERE

from eo_jobs.protocol.gid import Gid
from eo_jobs.sinks.postgres.writer import PostgresWriter

pytestmark = pytest.mark.spark


def _prepared(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {str(r[0]) for r in conn.execute(PREPARED_HERE).fetchall()}


def test_a_straggler_of_a_decided_batch_is_rolled_back_while_the_stream_is_idle(
    tmp_path: Path, pg_dsn: str
) -> None:
    harness.create_table(pg_dsn)
    truth = harness.write_files(tmp_path / "in", files=1, per_file=50, malformed_every=999)
    spec = harness.files_pipeline(tmp_path)
    driver = harness.Driver(spec, 1, pg_dsn, available_now=False)
    try:
        deadline = time.monotonic() + 180
        while driver.batches_done() < 1 or _prepared(pg_dsn):
            assert driver.proc.poll() is None, driver.output()
            assert time.monotonic() < deadline, driver.output()
            time.sleep(0.2)
        # Batch 0 is committed. An attempt of its writer task 1 PREPAREs only now.
        metadata = (tmp_path / "checkpoint" / "metadata").read_text()
        gid = str(
            Gid.build(
                pipeline=harness.PIPELINE,
                query_id=json.loads(metadata.splitlines()[0])["id"],
                sink="orders",
                epoch=1,
                batch=0,
                task=1,
                attempt=4242,
            )
        )
        writer = PostgresWriter(
            dsn=pg_dsn, table="public.orders", columns=("order_id", "merchant", "amount_cents")
        )
        writer.write([(9999, "late", 1)], gid=gid, pipeline=harness.PIPELINE, batch_id=0)
        assert gid in _prepared(pg_dsn)

        deadline = time.monotonic() + 60  # no new input: no next batch to clear it
        while gid in _prepared(pg_dsn):
            assert driver.proc.poll() is None, driver.output()
            assert time.monotonic() < deadline, f"straggler still prepared: {driver.output()}"
            time.sleep(0.5)
        assert gid in driver.output()  # logged
        driver.kill(signal.SIGTERM)
        assert driver.wait(120) == 0, driver.output()
    finally:
        driver.kill()
    harness.assert_exact(pg_dsn, truth)
