"""The chaos loop: a pipeline under a growing stream, one random fault after another, then the
audit. Seeded: the same seed picks the same faults in the same order (timings still vary)."""

from __future__ import annotations

import contextlib
import json
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pymysql

from bench.chaos import audit as checks
from bench.chaos.continuous import ContinuousAudit, chaos_target
from bench.chaos.driver import ChaosDriver
from bench.chaos.faults import KINDS, MYSQL_KINDS
from bench.chaos.stream import (
    CHUNK,
    CHUNK_SECONDS,
    SCHEMA,
    Stream,
    file_emitter,
    kafka_emitter,
)
from eo_jobs.mariadbserver import MariaDbServer
from eo_jobs.mariadbserver import temporary_server as temporary_mariadb
from eo_jobs.pgserver import PgServer, temporary_server
from eo_jobs.protocol.control import ControlStore
from eo_jobs.protocol.mysql_xa import MySqlPreparedTransactions
from eo_jobs.protocol.participants import ParticipantStore
from eo_jobs.protocol.recovery import recover
from eo_jobs.protocol.xa import PreparedTransactions

TABLES = (
    "CREATE TABLE public.ledger (order_id bigint NOT NULL, merchant text, amount_cents bigint)",
    "CREATE TABLE public.latest (order_id bigint PRIMARY KEY, merchant text, amount_cents bigint)",
    checks.TOTALS_DDL,
)
MYSQL_TABLES = (
    "CREATE TABLE ledger (order_id BIGINT NOT NULL, merchant VARCHAR(64), amount_cents BIGINT)"
    " ENGINE=InnoDB",
    "CREATE TABLE latest (order_id BIGINT PRIMARY KEY, merchant VARCHAR(64), amount_cents BIGINT)"
    " ENGINE=InnoDB",
)
"""``--sink mysql``: the append and the upsert sinks in MariaDB (the totals stay in PostgreSQL,
beside the control database: mode accumulate is PostgreSQL's)."""
SETTLE_SECONDS = 240.0
"""How long a pipeline may take to decide a new batch after a fault before it counts as stuck."""


def files_source(work: Path) -> str:
    """The ``spec.source`` of the files stream (YAML flow mapping)."""
    return (
        f'{{files: {{path: "{work / "in"}", format: json, maxFilesPerTrigger: 8, '
        f'schema: "{SCHEMA}"}}}}'
    )


def kafka_source(bootstrap: str, topic: str) -> str:
    """The ``spec.source`` of the Kafka stream (YAML flow mapping)."""
    return (
        f'{{kafka: {{bootstrapServers: "{bootstrap}", topics: [{topic}], '
        f'startingOffsets: earliest, maxOffsetsPerTrigger: 2400, schema: "{SCHEMA}"}}}}'
    )


def pipeline_yaml(work: Path, source: str, sink: str = "postgres") -> str:
    """``source`` -> three sinks (append, upsert, accumulate) in one database, exactly once;
    with ``sink`` mysql the first two in MariaDB (``mysql_pipeline_yaml``)."""
    if sink == "mysql":
        return mysql_pipeline_yaml(work, source)
    return f"""apiVersion: eo.dev/v1alpha1
kind: ExactlyOncePipeline
metadata: {{name: orders, namespace: chaos}}
spec:
  guarantee: exactly-once
  source: {source}
  sinks:
    - name: ledger
      postgres: {{dsn: {{env: CHAOS_DSN}}, table: public.ledger, writerPartitions: 2,
                 sumColumns: [amount_cents]}}
    - name: latest
      postgres: {{dsn: {{env: CHAOS_DSN}}, table: public.latest, mode: upsert,
                 keyColumns: [order_id], writerPartitions: 2}}
    - name: totals
      transform: {{sql: "{checks.TOTALS_SQL}"}}
      postgres: {{dsn: {{env: CHAOS_DSN}}, table: public.merchant_totals, mode: accumulate,
                 keyColumns: [merchant], addColumns: [volume_cents, orders], writerPartitions: 2,
                 sumColumns: [volume_cents, orders]}}
  checkpoint: {{location: "{work / "checkpoint"}", triggerIntervalSeconds: 1}}
  driver: {{cores: 2, memory: 768m}}
"""


def mysql_pipeline_yaml(work: Path, source: str) -> str:
    """``source`` -> the ledger (append) and the latest table (upsert) in MariaDB, the totals
    (accumulate) in PostgreSQL, under one decision per batch in PostgreSQL (``spec.control``);
    the dead letters go to the first sink's database, MariaDB."""
    return f"""apiVersion: eo.dev/v1alpha1
kind: ExactlyOncePipeline
metadata: {{name: orders, namespace: chaos}}
spec:
  guarantee: exactly-once
  source: {source}
  control: {{dsn: {{env: CHAOS_DSN}}}}
  sinks:
    - name: ledger
      mysql: {{dsn: {{env: CHAOS_MYSQL_DSN}}, table: chaos.ledger, writerPartitions: 2}}
    - name: latest
      mysql: {{dsn: {{env: CHAOS_MYSQL_DSN}}, table: chaos.latest, mode: upsert,
              keyColumns: [order_id], writerPartitions: 2}}
    - name: totals
      transform: {{sql: "{checks.TOTALS_SQL}"}}
      postgres: {{dsn: {{env: CHAOS_DSN}}, table: public.merchant_totals, mode: accumulate,
                 keyColumns: [merchant], addColumns: [volume_cents, orders], writerPartitions: 2,
                 sumColumns: [volume_cents, orders]}}
  checkpoint: {{location: "{work / "checkpoint"}", triggerIntervalSeconds: 1}}
  driver: {{cores: 2, memory: 768m}}
"""


@dataclass(frozen=True)
class Plan:
    """What a run does: which faults, how many or for how long, from which source."""

    seed: int
    minutes: float | None
    faults: int | None
    kinds: list[str]
    source: str = "files"
    """``files`` (JSON-lines files) or ``kafka`` (a real broker started for the run)."""
    executors: int = 0
    """Executor pods of the pipeline (operator mode only; 0: the writers run in the driver)."""
    sink: str = "postgres"
    """``postgres`` (every sink in PostgreSQL) or ``mysql`` (the ledger and the latest table
    in a MariaDB server started for the run: ``mysql_pipeline_yaml``)."""


@dataclass
class Chaos:
    """The state of a run: server, pipeline, current driver, what happened."""

    work: Path
    server: PgServer
    dsn: str
    rng: random.Random
    spec: Path
    fault_file: Path
    driver: ChaosDriver = field(init=False)
    epoch: int = 0
    launches: list[int] = field(default_factory=list)
    drivers: list[ChaosDriver] = field(default_factory=list)
    relaunch_reasons: Counter[str] = field(default_factory=Counter)
    stalls: int = 0
    duplicates_seen: int = 0
    mysql: MariaDbServer | None = None
    """The MariaDB server of ``--sink mysql``."""
    mysql_dsn: str | None = None

    @property
    def rows_dsn(self) -> str:
        """Where the ledger and the latest table are."""
        return self.mysql_dsn or self.dsn

    def launch(self) -> None:
        """Fence and resolve for a new epoch (retried while PostgreSQL is away), then start."""
        epoch = self.epoch + 1
        deadline = time.monotonic() + 120
        while True:
            try:
                stores: list[ParticipantStore] = [PreparedTransactions(self.dsn)]
                if self.mysql_dsn is not None:
                    stores.append(MySqlPreparedTransactions(self.mysql_dsn))
                recover(ControlStore(self.dsn), stores, checks.PIPELINE, epoch)
                break
            except (psycopg.OperationalError, pymysql.OperationalError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        self.epoch = epoch
        self.launches.append(epoch)
        log = self.work / "logs" / f"driver-{epoch:04d}.log"
        self.driver = ChaosDriver(self.spec, epoch, self.dsn, self.fault_file, log, self.mysql_dsn)
        self.drivers.append(self.driver)

    def relaunch(self, reason: str, *, keep_old: bool = False) -> None:
        """What the operator does for a dead (or presumed dead) driver."""
        if not keep_old:
            self.driver.signal(signal.SIGKILL)
            self.driver.wait(30)
        self.relaunch_reasons[reason] += 1
        self.launch()

    def survived_or_relaunched(self, reason: str) -> str:
        """After a fault the driver may ride out: it either decides a new batch or is replaced."""
        before = len(self.driver.decided)
        if self.driver.wait_for_batches(before + 1, SETTLE_SECONDS):
            return "survived"
        self.relaunch(reason)
        return "relaunched"

    def arm(self, fault: dict[str, object]) -> None:
        """Arm a fault in the running driver (written whole, then renamed: never half-read)."""
        tmp = self.fault_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(fault), encoding="utf-8")
        tmp.rename(self.fault_file)

    def disarm(self) -> None:
        """No fault armed."""
        self.fault_file.unlink(missing_ok=True)

    def relaunch_if_dead(self) -> None:
        """A driver that exited is replaced (while draining)."""
        if not self.driver.alive():
            self.relaunch("exited while draining")

    def settle(self) -> None:
        """Until the pipeline decides a new batch; a stuck one is counted and replaced."""
        if not self.driver.alive():
            self.relaunch("exited")
        before = len(self.driver.decided)
        if not self.driver.wait_for_batches(before + 1, SETTLE_SECONDS):
            if self.driver.alive():
                self.stalls += 1
            self.relaunch("stalled" if self.driver.alive() else "exited")
            self.driver.wait_for_batches(1, SETTLE_SECONDS)


@dataclass
class Summary:
    """What a run did and found."""

    seed: int
    faults: Counter[str]
    outcomes: Counter[str]
    findings: checks.Findings
    relaunches: Counter[str]
    stalls: int
    duplicates_seen: int
    seconds: float
    records: int
    audit: ContinuousAudit

    def violations(self) -> dict[str, int]:
        """Every non-zero violation count, by name: the harness's and eo's auditor's."""
        found = self.findings.violations()
        found.update(self.audit.violations)
        if self.stalls:
            found["stalls"] = self.stalls
        if self.duplicates_seen:
            found["duplicates_seen_during_run"] = self.duplicates_seen
        return found


def run(plan: Plan, work: Path) -> Summary:
    """The whole chaos run; stops after ``plan.faults`` faults or ``plan.minutes``."""
    started = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)
    (work / "logs").mkdir(exist_ok=True)
    with contextlib.ExitStack() as stack:
        # The server's folder is a fresh 0755 one of its own: under root, PostgreSQL runs as an
        # unprivileged user that could not enter a 0700 work folder (pytest's, mktemp's).
        server = stack.enter_context(temporary_server())
        mysql = None
        if plan.sink == "mysql":
            mysql = temporary_mariadb()
            stack.callback(mysql.remove)
        if plan.source == "kafka":
            from tests.support.kafka import KafkaBroker, broker_jars_dir

            (work / "kafka").mkdir(exist_ok=True)
            broker = stack.enter_context(KafkaBroker(work / "kafka", broker_jars_dir()))
            broker.create_topic("orders", partitions=4)
            emit = kafka_emitter(lambda records: broker.produce("orders", records))
            source = kafka_source(broker.bootstrap_servers, "orders")
        else:
            emit, source = file_emitter(work / "in"), files_source(work)
        stream = Stream(emit, plan.seed, per_file=CHUNK, interval=CHUNK_SECONDS)
        try:
            return _run(plan, work, server, stream, source, started, mysql)
        finally:
            stream.stop()


def _run(
    plan: Plan,
    work: Path,
    server: PgServer,
    stream: Stream,
    source: str,
    started: float,
    mysql: MariaDbServer | None = None,
) -> Summary:
    rng = random.Random(plan.seed)  # noqa: S311 - a reproducible choice of faults
    dsn = server.create_database("chaos")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for ddl in TABLES:
            conn.execute(ddl)
    mysql_dsn = None
    if mysql is not None:
        database = mysql.create_database("chaos")
        with mysql.connect("chaos") as my, my.cursor() as cur:
            for ddl in MYSQL_TABLES:
                cur.execute(ddl)
        mysql_dsn = database.dsn
    spec = work / "pipeline.yaml"
    spec.write_text(pipeline_yaml(work, source, plan.sink), encoding="utf-8")
    chaos = Chaos(work, server, dsn, rng, spec, work / "fault.json", mysql=mysql)
    chaos.mysql_dsn = mysql_dsn
    for _ in range(3):
        stream.write_file()
    stream.start()
    chaos.launch()
    chaos.settle()
    auditor = ContinuousAudit(
        chaos_target("chaos/orders", dsn, work / "checkpoint", mysql_dsn=mysql_dsn)
    )
    done, outcomes, seen = fault_loop(
        plan,
        lambda kind: {**KINDS, **MYSQL_KINDS}[kind](chaos),
        chaos.settle,
        dsn,
        lambda: f"epoch {chaos.epoch}",
        started,
        auditor,
        rows_dsn=chaos.rows_dsn,
    )
    chaos.duplicates_seen = seen
    stream.stop()
    chaos.disarm()
    _drain(chaos, len(stream.truth.valid))
    chaos.driver.stop()
    auditor.finish()
    decided = [batch for driver in chaos.drivers for batch in driver.decided]
    findings = checks.audit(dsn, stream.truth, decided, chaos.rows_dsn)
    return Summary(
        seed=plan.seed,
        faults=done,
        outcomes=outcomes,
        findings=findings,
        relaunches=chaos.relaunch_reasons,
        stalls=chaos.stalls,
        duplicates_seen=chaos.duplicates_seen,
        seconds=time.monotonic() - started,
        records=len(stream.truth.valid),
        audit=auditor,
    )


def fault_loop(
    plan: Plan,
    inject: Callable[[str], str],
    settle: Callable[[], None],
    dsn: str,
    where: Callable[[], str],
    started: float,
    auditor: ContinuousAudit,
    rows_dsn: str | None = None,
) -> tuple[Counter[str], Counter[str], int]:
    """Faults until ``plan`` says stop: every kind once per round in a seeded random order,
    each followed by ``settle`` (the pipeline must move again), a duplicate check and a pass
    of eo's own auditor.
    Returns faults by kind, outcomes, and the most duplicates seen at any check."""
    rng = random.Random(plan.seed)  # noqa: S311 - a reproducible choice of faults
    done: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    seen = 0
    deadline = started + plan.minutes * 60 if plan.minutes else None
    order: list[str] = []
    while (plan.faults is None or sum(done.values()) < plan.faults) and (
        deadline is None or time.monotonic() < deadline
    ):
        if not order:
            order = rng.sample(plan.kinds, len(plan.kinds))
        kind = order.pop()
        outcome = inject(kind)
        done[kind] += 1
        outcomes[f"{kind}: {outcome}"] += 1
        print(
            f"[{time.monotonic() - started:7.0f}s] fault {sum(done.values()):>4} {kind:<17}"
            f" -> {outcome:<22} {where()}, last batch {checks.last_batch(dsn)}",
            flush=True,
        )
        settle()
        seen = max(seen, checks.duplicates_so_far(rows_dsn or dsn))
        auditor.run_pass()
    return done, outcomes, seen


def _drain(chaos: Chaos, records: int) -> None:
    """Let the pipeline catch up with the whole stream (relaunching a dead driver)."""
    wait_until_delivered(chaos.rows_dsn, records, chaos.relaunch_if_dead)
    time.sleep(3)  # a batch in flight finishes its phase 2


def wait_until_delivered(dsn: str, records: int, tend: Callable[[], None]) -> None:
    """Until every record is in the append sink, or nothing moved for 5 minutes."""
    last, moved = -1, time.monotonic()
    while (now := checks.delivered(dsn)) < records:
        if now != last:
            last, moved = now, time.monotonic()
        elif time.monotonic() - moved > 300:
            return
        tend()
        time.sleep(1)
