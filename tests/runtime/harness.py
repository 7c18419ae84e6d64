"""Real `eo run` drivers for runtime tests: generated input, child processes, audits."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from bench import fast_jvm
from eo_jobs.protocol.gid import pipeline_prefix

REPO = Path(__file__).resolve().parents[2]
PIPELINE = "test/orders"
TABLE_DDL = (
    "CREATE TABLE IF NOT EXISTS public.orders (order_id bigint NOT NULL, merchant text, "
    "amount_cents bigint)"
)


@dataclass
class Truth:
    """Ground truth of generated input."""

    valid: dict[int, int] = field(default_factory=dict)
    malformed: int = 0


def _stamp_in_order(path: Path) -> None:
    """Give ``path`` a modification time at least 2 ms after every other file's in its folder.

    Spark's file source takes new files in order of their modification time in milliseconds;
    files written within one millisecond tie, and a tie is broken by listing order, not by name,
    so a test that names which file a batch holds needs each file strictly later than the last.
    """
    others = (p.stat().st_mtime_ns for p in path.parent.iterdir() if p != path)
    stamp = max(time.time_ns(), max(others, default=0) + 2_000_000)
    os.utime(path, ns=(stamp, stamp))


def write_files(
    folder: Path, files: int, per_file: int, start: int = 0, malformed_every: int = 40
) -> Truth:
    """JSON-lines files (atomically renamed in, in order of modification time), with a
    malformed line every N records."""
    truth = Truth()
    folder.mkdir(parents=True, exist_ok=True)
    order_id = start
    for index in range(files):
        lines = []
        for _ in range(per_file):
            amount = (order_id * 37) % 10_000
            lines.append(
                json.dumps(
                    {"order_id": order_id, "merchant": f"m{order_id % 5}", "amount_cents": amount}
                )
            )
            truth.valid[order_id] = amount
            order_id += 1
            if order_id % malformed_every == 0:
                lines.append('{"order_id": ' + str(order_id) + ', "merchant": ')
                truth.malformed += 1
        tmp = folder / f".part-{start}-{index}.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        _stamp_in_order(tmp)
        tmp.rename(folder / f"part-{start:06d}-{index:03d}.json")
    return truth


def files_pipeline(
    work: Path,
    *,
    transform: str | None = None,
    per_trigger: int = 2,
    guarantee: str = "exactly-once",
    checkpoint: str | None = None,
    more_sinks: str = "",
    orders_options: str = "",
) -> Path:
    """A pipeline file: JSON files -> (transform) -> public.orders.

    ``checkpoint`` is the YAML flow mapping of ``spec.checkpoint`` (default: a local folder);
    ``more_sinks``: YAML list items of more sinks, indented as the first one;
    ``orders_options``: more entries of the orders sink's ``postgres`` flow mapping.
    """
    sql = transform or "SELECT order_id, merchant, amount_cents FROM source"
    checkpoint = checkpoint or f'{{location: "{work / "checkpoint"}", triggerIntervalSeconds: 0}}'
    spec = work / "pipeline.yaml"
    spec.write_text(f"""apiVersion: eo.dev/v1alpha1
kind: ExactlyOncePipeline
metadata: {{name: orders, namespace: test}}
spec:
  guarantee: {guarantee}
  source:
    files: {{path: "{work / "in"}", format: json, maxFilesPerTrigger: {per_trigger},
            schema: "order_id BIGINT, merchant STRING, amount_cents BIGINT"}}
  transform: {{sql: "{sql}"}}
  sinks:
    - name: orders
      postgres: {{dsn: {{env: TEST_DSN}}, table: public.orders,
                 writerPartitions: 2{orders_options}}}
{more_sinks}  checkpoint: {checkpoint}
  driver: {{cores: 2, memory: 768m}}
""")
    return spec


def create_table(dsn: str) -> None:
    """The sink table (no key: duplicates must be countable)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(TABLE_DDL)


class Driver:
    """An `eo run` child in its own process group (a pod)."""

    def __init__(
        self,
        spec: Path,
        epoch: int,
        dsn: str,
        *,
        extra_env: dict[str, str] | None = None,
        available_now: bool = True,
        log: Path | None = None,
        metrics_port: int = 0,
        without_postgres: bool = False,
    ) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("EO_FAULT")}
        env.update(
            {
                "TEST_DSN": dsn,
                "EO_SPARK_DRIVER_JAVA_OPTIONS": fast_jvm.java_options(),
                "EO_LOG_LEVEL": "INFO",
                **(extra_env or {}),
            }
        )
        if without_postgres:  # no PostgreSQL reachable through the environment at all
            env = {
                k: v
                for k, v in env.items()
                if k != "TEST_DSN"
                and not k.startswith("PG")
                and not any(m in v for m in ("postgresql://", "postgres://", "dbname="))
            }
        self.log_path = log or spec.parent / f"driver-{epoch}-{time.monotonic_ns()}.log"
        self._log = self.log_path.open("w")
        args = [
            sys.executable,
            "-m",
            "eo_jobs.cli",
            "run",
            str(spec),
            "--epoch",
            str(epoch),
            "--metrics-port",
            str(metrics_port),
        ]
        if available_now:
            args.append("--available-now")
        self.proc = subprocess.Popen(
            args,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
            start_new_session=True,
        )

    def wait(self, timeout: float = 600) -> int:
        """Exit code (negative signal number when killed); kills leftovers of the group."""
        try:
            code = self.proc.wait(timeout)
        finally:
            self.kill()
            self._log.close()
        return code

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def output(self) -> str:
        """Everything the driver printed."""
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def batches_done(self) -> int:
        """Batches this driver decided so far."""
        return sum(1 for line in self.output().splitlines() if line.startswith('{"event": "batch"'))


def run(spec: Path, epoch: int, dsn: str, **kwargs: object) -> tuple[int, str]:
    """Run a driver to its end."""
    driver = Driver(spec, epoch, dsn, **kwargs)  # type: ignore[arg-type]
    code = driver.wait()
    return code, driver.output()


FIRST_ATTEMPT_FAILS = {
    "EO_FAULT_POINT": "after-some-prepared",
    "EO_FAULT_ACTION": "raise",
    "EO_FAULT_BATCH": "0",
}
"""The fault of a retry scene: batch 0's first writer task raises after it prepared."""


def run_past_a_failed_attempt(spec: Path, dsn: str, env: dict[str, str] | None = None) -> str:
    """Run a driver (epoch 1) whose first writer task of batch 0 fails after it prepared, and
    return its output once it has shown the scene played: the fault fired, the attempt's
    transaction was rolled back, Spark's retry wrote the batch and the run ended well. What
    the retry left in the sink is for each test to check."""
    code, out = run(spec, 1, dsn, extra_env={**FIRST_ATTEMPT_FAILS, **(env or {})})
    assert code == 0, out
    assert "fault injected at after-some-prepared of batch 0" in out, out
    assert "failed: rolled-back" in out, out
    return out


@dataclass(frozen=True)
class Audit:
    """Sink vs source, duplicates and gaps counted separately."""

    rows: int
    duplicates: int
    missing: int
    unexpected: int
    wrong_amounts: int
    dead_letters: int
    prepared_left: int


def audit(dsn: str, truth: Truth, table: str = "public.orders") -> Audit:
    """Compare the sink table with the generated truth."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f"SELECT order_id, amount_cents FROM {table}").fetchall()
        dead = conn.execute(f"SELECT count(*) FROM {table}_dead_letter").fetchone()
        left = conn.execute(
            "SELECT count(*) FROM pg_prepared_xacts WHERE starts_with(gid, %s) "
            "AND database = current_database()",
            (pipeline_prefix(PIPELINE),),
        ).fetchone()
    counts = Counter(r[0] for r in rows)
    amounts = {r[0]: r[1] for r in rows}
    return Audit(
        rows=len(rows),
        duplicates=sum(c - 1 for c in counts.values()),
        missing=sum(1 for k in truth.valid if k not in counts),
        unexpected=sum(1 for k in counts if k not in truth.valid),
        wrong_amounts=sum(1 for k, v in truth.valid.items() if k in amounts and amounts[k] != v),
        dead_letters=int(dead[0]) if dead else -1,
        prepared_left=int(left[0]) if left else -1,
    )


def assert_exact(dsn: str, truth: Truth) -> Audit:
    """Every valid record once, every malformed one once in dead letters, nothing prepared."""
    result = audit(dsn, truth)
    assert result == Audit(len(truth.valid), 0, 0, 0, 0, truth.malformed, 0), result
    return result
