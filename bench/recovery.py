"""SIGKILL to the first new decided batch: how long a crashed driver's pipeline stands still.

A real ``eo run`` (exactly-once, epoch 1) streams the input; after its first batch line, as soon
as a participant of the next batch is prepared (the worst moment: the batch is half written and
its transactions hold locks), its whole process group gets SIGKILL. A new driver with epoch 2
starts at once and runs to the end of the input. From its JSON lines, stamped on arrival:

- **Spark start-up**: from the kill to the start of recovery (interpreter, JVM and
  SparkSession start, sink checks: everything ``eo run`` does before it fences);
- **fence + resolve**: the ``recovered`` event's own ``seconds`` (fence raised, everything the
  dead epoch left prepared committed or rolled back);
- **first batch**: from the end of recovery to the first ``batch`` line (the streaming query
  starts, the interrupted batch is re-run, the Python workers start).

The table is then audited like every exactly-once run: the kill must cost time, never rows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench import data, runner
from bench.variants import BY_NAME, REPO, Shape, command, environment, pipeline_file
from eo_jobs.pgserver import PgServer

KILL_WAIT_SECONDS = 60.0
"""How long to wait, after the first batch, for the next batch's participants to be prepared."""


@dataclass(frozen=True)
class Recovery:
    """One kill and restart."""

    kill_to_first_batch_s: float
    spark_startup_s: float
    fence_resolve_s: float
    first_batch_s: float
    """Recovery end to the first batch line (query start plus that batch)."""
    first_batch_own_s: float
    """That batch's own ``seconds`` (inside ``foreachBatch``)."""
    committed: int
    rolled_back: int
    """Participants of the killed driver that the new one's recovery finished."""
    batches_before_kill: int
    prepared_at_kill: int
    """Participants seen prepared just before the kill (0: the kill fell between batches)."""
    code: int
    """Exit code of the new driver (0 when it reached the end of the input)."""
    audit: data.Audit
    logs: tuple[str, str]

    @property
    def exact(self) -> bool:
        """Every event exactly once after the kill, and the new driver finished cleanly."""
        return self.code == 0 and self.audit.exact


def _wait_for_prepared(dsn: str, driver: runner.Driver) -> int:
    """Poll until a participant is prepared (or the next batch ended); how many there were."""
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline and driver.proc.poll() is None:
            row = conn.execute(
                "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()"
            ).fetchone()
            if row is not None and row[0]:
                return int(row[0])
            if sum(e.record.get("event") == "batch" for e in driver.events) > 1:
                return 0
            time.sleep(0.005)
    return 0


def measure(server: PgServer, shape: Shape, folder: Path, events: int, timeout: float) -> Recovery:
    """Kill an exactly-once driver mid-stream, restart it, time and audit (see the module)."""
    variant = BY_NAME["exactly-once"]
    folder.mkdir(parents=True)
    database = folder.name.replace("-", "_")
    dsn = server.create_database(database)
    data.create_table(dsn, variant.table)
    spec = pipeline_file(folder, variant, shape)
    env = environment(dsn)
    first = runner.Driver(command(variant, spec, "", epoch=1), env, folder / "killed.log", REPO)
    try:
        batch = first.wait_for(lambda e: e.record.get("event") == "batch", timeout)
        if batch is None:
            raise RuntimeError(f"the first driver ran no batch; see {first.log}")
        prepared_at_kill = _wait_for_prepared(dsn, first)
        killed = first.kill()
    finally:
        gone = first.finish(30)
    second = runner.Driver(command(variant, spec, "", epoch=2), env, folder / "restarted.log", REPO)
    recovered = second.wait_for(lambda e: e.record.get("event") == "recovered", timeout)
    batch = second.wait_for(lambda e: e.record.get("event") == "batch", timeout)
    run = second.finish(timeout)
    if recovered is None or batch is None:
        raise RuntimeError(
            f"the restarted driver did not recover and write (exit {run.code}):\n{run.tail()}"
        )
    fence_resolve = float(recovered.record["seconds"])
    recovery_started = recovered.arrived - fence_resolve
    return Recovery(
        kill_to_first_batch_s=batch.arrived - killed,
        spark_startup_s=recovery_started - killed,
        fence_resolve_s=fence_resolve,
        first_batch_s=batch.arrived - recovered.arrived,
        first_batch_own_s=float(batch.record["seconds"]),
        committed=len(recovered.record.get("committed", [])),
        rolled_back=len(recovered.record.get("rolled_back", [])),
        batches_before_kill=len(gone.batches),
        prepared_at_kill=prepared_at_kill,
        code=run.code,
        audit=data.audit(dsn, variant.table, events),
        logs=(str(first.log), str(second.log)),
    )
