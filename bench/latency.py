"""Event-to-visible latency from Kafka to PostgreSQL: how long after a payment event is sent it
can be read in the ledger, for eo exactly-once and at-least-once at several steady rates.

``python -m bench.latency --rates 1000,5000,10000 --seconds 60 --trigger-seconds 1`` starts one
embedded PostgreSQL with ``track_commit_timestamp = on`` and the tests' KRaft broker. For each
variant and rate it starts a driver (``eo run``, not ``availableNow``) on a topic of its own,
then produces events at the rate, without a pause, for a warm-up and then ``--seconds``
seconds (the measured window), each carrying its
send time (``sent_at``, stamped as it is handed to the producer), and waits until every event
is in the table. An event becomes visible when the transaction that wrote it commits: for
exactly-once that is the ``COMMIT PREPARED`` of phase 2, for at-least-once the writer task's
own commit. PostgreSQL records that instant per transaction, so the latency of every row is
``pg_xact_commit_timestamp(xmin) - sent_at``, read once at the end: nothing polls the table
while the pipeline runs, and both clocks are this machine's. Events of the warm-up are left
out: Spark's first batch compiles and plans for seconds while events pile up, and the batches
after it drain them. The warm-up is ``--warmup`` seconds and then as long as the driver needs
to be past that backlog (``caught_up``: three batches in a row of at most two trigger
intervals' events; at most ``--max-warmup``), so the window measures the running pipeline,
not its start-up (a fixed 20 s warm-up left 7 s of catch-up in a 60 s window at 37,500/s, and
p99 said 5.5 s where the steady state's per-second maxima were 1.5-2.6 s).

``--find-max LOW:HIGH`` first searches the highest rate exactly-once keeps up with here, the
producer and the broker on the same cores (``find_max``), then runs at half of it and 70 %.

What the figures are made of: the wait for the next trigger (up to the trigger interval), the
batch's own read, transform and write, the decision (exactly-once) and phase 2's commit. The
report also gives the batches' p50 duration, so the part of the latency the trigger sets shows.

Exit code 0 when every run saw every event exactly once (the audit counts duplicates and
missing events separately). Targets (issue 31) are reported, never enforced.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Producer

from bench import data, kafka_input, runner
from bench.compare import conclude, markdown, say
from bench.variants import BY_NAME, REPO, Shape, command, environment, pipeline_file
from eo_jobs.pgserver import PgServer, temporary_server

SCHEMA_DDL = data.SCHEMA_DDL + ", sent_at TIMESTAMP"
TABLE = "public.ledger"
"""The sink table (named literally in the queries below too)."""
TABLE_DDL = (
    "CREATE TABLE public.ledger (order_id bigint NOT NULL, customer_id bigint, merchant text, "
    "amount_cents bigint, currency text, created_at timestamptz, sent_at timestamptz)"
)
SETTINGS = {"track_commit_timestamp": "on", "max_prepared_transactions": "100"}
TICK_SECONDS = 0.005
"""How often the producer catches up with its schedule: a 5 ms step of the send time."""
VARIANTS = ("exactly-once", "at-least-once")


@dataclass(frozen=True)
class Latency:
    """One variant at one rate."""

    variant: str
    rate: int
    """Events per second asked for."""
    achieved_rate: float
    """Events per second the producer handed over (the measured window only)."""
    trigger_seconds: int
    events: int
    measured: int
    """Events in the percentiles (the warm-up's are left out)."""
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    batches: int
    batch_p50_s: float
    duplicates: int
    missing: int
    code: int
    log: str
    cpu_percent: float = math.nan
    """CPU the driver's processes (Python, Spark's JVM, its Python workers) used in the measured
    window, in % of one core: what a rate and a trigger interval cost the machine."""
    parts_ms: dict[str, float] = field(default_factory=dict)
    """p50 milliseconds of each part of the measured window's batches (``batch_parts``)."""
    warmup_s: float = math.nan
    """How long the warm-up produced before the window: ``--warmup``, longer while the driver
    was still draining its start-up backlog (``warm_up``)."""
    caught_up: bool = True
    """The driver was past its start-up backlog when the window began (else the warm-up ran
    out at ``--max-warmup`` and the window measures a pipeline still catching up)."""

    @property
    def exact(self) -> bool:
        """Every event exactly once."""
        return self.duplicates == 0 and self.missing == 0


def _bodies(first: int, total: int, chunk: int = 50_000) -> Iterator[str]:
    """Orders ``first ..`` as JSON objects without their closing brace (the send time goes
    there), generated a chunk at a time by ``data.json_lines``' vectorized rules."""
    for start in range(first, first + total, chunk):
        for line in data.json_lines(start, min(chunk, first + total - start)).splitlines():
            yield line[:-1]


class RateProducer:
    """Orders ``0 ..`` into one topic at a fixed rate, each stamped with its send time, in
    stretches of seconds that follow each other (one producer for the run: the warm-up's
    stretches, then the measured window).

    The send time is read once per step (``TICK_SECONDS``) and stamped on the events the step
    sends, which are handed to the producer right after it: a stamp is at most a step's sending
    early, so a latency is over-, never under-stated. Encoding each event with ``json.dumps``
    and a clock read of its own managed ~69,000 events/s here before handing any to Kafka, on a
    core Spark needs; the bodies built in bulk ~320,000/s.
    """

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        self.topic = topic
        self.rate = rate
        self.sent = 0
        """Events handed over so far: the next one's ``order_id``."""
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": 1,
                "acks": "all",
                "queue.buffering.max.messages": 1_000_000,
            }
        )

    def send(self, seconds: float) -> float:
        """The next ``rate * seconds`` events at the rate; the time it took (flushed)."""
        total = int(self.rate * seconds)
        bodies = _bodies(self.sent, total)
        sent = 0
        started = time.monotonic()
        while sent < total:
            due = min(total, int((time.monotonic() - started) * self.rate) + 1)
            stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
            tail = f', "sent_at": "{stamp}"}}'
            while sent < due:
                value = (next(bodies) + tail).encode()
                while True:
                    try:
                        self._producer.produce(self.topic, value)
                        break
                    except BufferError:
                        self._producer.poll(0.01)
                sent += 1
            self._producer.poll(0)
            time.sleep(TICK_SECONDS)
        left = self._producer.flush(60)
        if left:
            raise RuntimeError(f"{left} events were never acknowledged by the broker")
        self.sent += total
        return time.monotonic() - started


CAUGHT_UP_BATCHES = 3
"""How many batches in a row must be of steady size before the measured window starts."""
WARMUP_STEP_SECONDS = 5.0
"""How much longer the warm-up produces each time the pipeline has not caught up yet."""


def caught_up(events: Sequence[runner.Event], rate: int, trigger_seconds: int) -> bool:
    """Whether the driver is past its start-up backlog: its last ``CAUGHT_UP_BATCHES`` batches
    each held at most two trigger intervals' events (at least a second's). The first batch
    compiles and plans for seconds while events pile up, and the batches after it drain them;
    an event sent then waits for the backlog, which is the start-up's cost (the recovery bench
    measures it), not the running pipeline's latency."""
    rows = [int(e.record.get("rows", 0)) for e in events if e.record.get("event") == "batch"]
    bound = 2 * rate * max(trigger_seconds, 1)
    last = rows[-CAUGHT_UP_BATCHES:]
    return len(last) == CAUGHT_UP_BATCHES and all(r <= bound for r in last)


def warm_up(
    producer: RateProducer, driver: runner.Driver, args: argparse.Namespace
) -> tuple[float, bool]:
    """Produce at the rate for ``--warmup`` seconds, then on until the driver has caught up
    (``caught_up``) or ``--max-warmup`` seconds have passed; the seconds it took and whether
    it caught up. The producer never pauses longer than a flush between the warm-up and the
    window, so the window starts on a pipeline in its steady state."""
    began = time.monotonic()
    producer.send(args.warmup)
    while not caught_up(list(driver.events), producer.rate, args.trigger_seconds):
        if time.monotonic() - began >= args.max_warmup:
            return time.monotonic() - began, False
        producer.send(WARMUP_STEP_SECONDS)
    return time.monotonic() - began, True


def _wait_visible(dsn: str, events: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT count(DISTINCT order_id) FROM public.ledger").fetchone()
            if row is not None and row[0] >= events:
                return
            time.sleep(0.2)
    raise RuntimeError(f"not every one of {events} events became visible in {timeout:.0f} s")


def cpu_seconds(group: int) -> float:
    """User + system CPU seconds of the live processes of a process group (the driver runs in a
    group of its own: its Python, Spark's JVM, the JVM's Python workers), from ``/proc``.
    A process that ended is not counted: the driver's processes live for the whole run."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        # fields[0] is the state (stat's 3rd field): pgrp is the 5th, utime/stime the 14th/15th.
        if int(fields[2]) == group:
            total += int(fields[11]) + int(fields[12])
    return total / ticks


def _wait_logged(driver: runner.Driver, events: int, timeout: float) -> None:
    """Wait until the driver has logged the batches that wrote every event, and Spark's progress
    of the last of them: a row is visible at its commit, before either line is written, and
    killing the driver in between would lose the last batch from the report."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logged = list(driver.events)
        batches = [e.record for e in logged if e.record.get("event") == "batch"]
        if batches and sum(int(b.get("rows", 0)) for b in batches) >= events:
            last = max(int(b["batch"]) for b in batches)
            if any(
                e.record.get("event") == "progress" and int(e.record.get("batch", -1)) >= last
                for e in logged
            ):
                return
        time.sleep(0.1)


def _read(dsn: str, events: int, warm: int) -> tuple[list[float], int, int]:
    """Latencies (ms, in send order: ``order_id``) of the measured events; duplicates;
    missing. The order is what ``kept_up`` reads a growing backlog from."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        counts = conn.execute(
            "SELECT count(*), count(DISTINCT order_id) FROM public.ledger WHERE order_id < %s",
            (events,),
        ).fetchone()
        rows = conn.execute(
            "SELECT extract(epoch FROM pg_xact_commit_timestamp(xmin) - sent_at) * 1000 "
            "FROM public.ledger WHERE order_id >= %s AND order_id < %s ORDER BY order_id",
            (warm, events),
        ).fetchall()
    assert counts is not None
    total, distinct = int(counts[0]), int(counts[1])
    return [float(r[0]) for r in rows], total - distinct, events - distinct


def measure(
    server: PgServer,
    broker: kafka_input.Broker,
    variant: str,
    rate: int,
    args: argparse.Namespace,
    folder: Path,
) -> tuple[Latency, list[float]]:
    """One driver, one topic, one database: produce at ``rate``, then read the latencies; the
    result and the measured events' latencies in send order (what ``kept_up`` reads)."""
    folder.mkdir(parents=True)
    name = f"{variant}-{rate}".replace("-", "_")
    dsn = server.create_database(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(TABLE_DDL)
    topic = f"latency-{variant}-{rate}"
    broker.create_topic(topic, args.kafka_partitions)
    shape = Shape(
        source=folder,
        files_per_trigger=1,
        partitions=args.partitions,
        cores=args.cores,
        memory=args.memory,
        kafka=kafka_input.KafkaTopic(broker.bootstrap_servers, topic, max(rate * 10, 1000)),
        schema=SCHEMA_DDL,
        trigger_seconds=args.trigger_seconds,
        table=TABLE,
    )
    chosen = BY_NAME[variant]
    spec = pipeline_file(folder, chosen, shape)
    argv = command(chosen, spec, "", available_now=False)
    driver = runner.Driver(argv, environment(dsn), folder / "driver.log", REPO)
    producer = RateProducer(broker.bootstrap_servers, topic, rate)
    try:
        # The query runs (Spark started, recovery done) before the first event is sent.
        started = driver.wait_for(lambda e: e.record.get("event") == "query-started", args.timeout)
        if started is None:
            raise RuntimeError(f"{variant}: the driver's query never started; see {driver.log}")
        warmup_s, steady = warm_up(producer, driver, args)
        warm = producer.sent
        measured_from = time.monotonic()
        cpu_from = cpu_seconds(driver.proc.pid)
        took = producer.send(args.seconds)
        cpu_percent = 100.0 * (cpu_seconds(driver.proc.pid) - cpu_from) / took
        events = producer.sent
        _wait_visible(dsn, events, args.timeout)
        _wait_logged(driver, events, 60)
    finally:
        driver.kill()
        run = driver.finish(30)
    latencies, duplicates, missing = _read(dsn, events, warm)
    measured = [b.seconds for b in run.batches]
    result = Latency(
        variant=variant,
        rate=rate,
        achieved_rate=(events - warm) / took,
        trigger_seconds=args.trigger_seconds,
        events=events,
        measured=len(latencies),
        p50_ms=runner.percentile(latencies, 0.50),
        p95_ms=runner.percentile(latencies, 0.95),
        p99_ms=runner.percentile(latencies, 0.99),
        max_ms=max(latencies),
        batches=len(run.batches),
        batch_p50_s=runner.percentile(measured, 0.5) if measured else 0.0,
        duplicates=duplicates,
        missing=missing,
        code=run.code,
        log=str(run.log),
        cpu_percent=cpu_percent,
        parts_ms=batch_parts(run.events, measured_from),
        warmup_s=warmup_s,
        caught_up=steady,
    )
    return result, latencies


GROWTH_MS = 1000.0
"""How far the p50 latency may rise from the first quarter of a probe's events to the last and
still count as kept up. A pipeline short of a rate by 5 % builds a backlog whose age grows by
0.75 x 30 s x 5 % = 1.1 s between the two quarters of a 30 s window: the search finds the
maximum to within ~5 % above it, and a single slow batch (a spike) moves neither median."""
SUSTAINED_SHARE = 0.97
"""The share of the asked rate the producer must have handed over: on these 2 cores the
producer shares the machine, and a rate it cannot send is not one the machine sustains."""


@dataclass(frozen=True)
class Probe:
    """One step of the search for the highest rate exactly-once keeps up with."""

    rate: int
    achieved_rate: float
    first_p50_ms: float
    """p50 latency of the first quarter of the measured events (in send order)."""
    last_p50_ms: float
    """p50 latency of the last quarter: above the first's by more than ``GROWTH_MS`` when a
    backlog grew."""
    p99_ms: float
    kept_up: bool
    exact: bool
    """Every event of the probe exactly once (a probe is audited like every run)."""


def kept_up(
    latencies: Sequence[float], rate: int, achieved_rate: float
) -> tuple[bool, float, float]:
    """Whether a run kept up with its rate, from its latencies in send order: a pipeline that
    falls behind builds a backlog, and the latency of the last events is then the first
    events' plus the backlog's age. Also the two quarters' p50s, for the report."""
    quarter = max(1, len(latencies) // 4)
    first = runner.percentile(latencies[:quarter], 0.5)
    last = runner.percentile(latencies[-quarter:], 0.5)
    ok = last <= first + GROWTH_MS and achieved_rate >= SUSTAINED_SHARE * rate
    return ok, first, last


def find_max(
    measure_rate: Callable[[int], tuple[Latency, list[float]]],
    low: int,
    high: int,
    precision: float,
) -> tuple[int | None, list[Probe]]:
    """The highest rate exactly-once keeps up with between ``low`` and ``high`` (None if not
    even ``low``), by geometric bisection until ``high / low <= 1 + precision``: the
    maximum a latency run on this machine can be held to, with the producer and the broker
    sharing its cores (``bench.compare`` measures a ceiling with the topic produced before the
    run, which a live pipeline never has). ``low`` is probed first; rates are rounded to
    hundreds."""
    probes: list[Probe] = []

    def probe(rate: int) -> bool:
        result, latencies = measure_rate(rate)
        ok, first, last = kept_up(latencies, rate, result.achieved_rate)
        ok = ok and result.caught_up
        probes.append(
            Probe(rate, result.achieved_rate, first, last, result.p99_ms, ok, result.exact)
        )
        say(f"  max search: {rate:,}/s {'kept up' if ok else 'fell behind'}")
        return ok

    if not probe(low):
        return None, probes
    while high / low > 1 + precision:
        middle = max(low + 100, round(math.sqrt(low * high) / 100) * 100)
        if middle >= high:
            break
        if probe(middle):
            low = middle
        else:
            high = middle
    return low, probes


SPARK_PARTS = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets")
"""Spark's own phases of a micro-batch (``StreamingQueryProgress.durationMs``): asking Kafka
for its latest offsets, planning, running the batch (eo's ``foreachBatch``: read, write, decide),
and logging its offsets before and its commit after."""
EO_PARTS = ("prepare_ms", "decide_ms", "commit_ms")
"""eo's parts of ``addBatch`` (phase 2's commit runs after Spark has the batch back)."""


def batch_parts(events: Sequence[runner.Event], since: float) -> dict[str, float]:
    """p50 ms of each part of the batches that ended after ``since``: Spark's phases from its
    progress events, eo's prepare/decide/commit from its batch events (exactly-once and
    at-least-once both log them), and the whole trigger (``triggerExecution``)."""
    progress = [
        e.record["duration_ms"]
        for e in events
        if e.arrived >= since
        and e.record.get("event") == "progress"
        and e.record.get("input_rows", 0) > 0
    ]
    batches = [e.record for e in events if e.arrived >= since and e.record.get("event") == "batch"]
    parts: dict[str, float] = {}
    for name in (*SPARK_PARTS, "triggerExecution"):
        values = [float(d[name]) for d in progress if name in d]
        if values:
            parts[name] = runner.percentile(values, 0.5)
    for name in EO_PARTS:
        values = [float(b[name]) for b in batches if name in b]
        if values:
            parts[name] = runner.percentile(values, 0.5)
    return parts


def targets(results: list[Latency], max_rate: int | None) -> list[dict[str, Any]]:
    """Issue 31's latency targets this run measured."""
    found: list[dict[str, Any]] = []
    by = {(r.variant, r.rate): r for r in results}
    for (variant, rate), eo in sorted(by.items()):
        if variant != "exactly-once":
            continue
        alo = by.get(("at-least-once", rate))
        if alo is not None:
            found.append(
                {
                    "target": f"EO p99 <= 1.2x ALO p99 at {rate:,}/s",
                    "value": eo.p99_ms / alo.p99_ms,
                    "threshold": 1.2,
                    "met": eo.p99_ms <= 1.2 * alo.p99_ms,
                }
            )
        if max_rate is not None and rate == max_rate // 2:
            bound = eo.trigger_seconds * 1000 + 1000
            found.append(
                {
                    "target": f"EO p99 <= trigger + 1 s at half the maximum ({rate:,}/s), ms",
                    "value": eo.p99_ms,
                    "threshold": bound,
                    "met": eo.p99_ms <= bound,
                }
            )
    return found


COLUMNS = (
    ("variant", "variant"),
    ("rate/s", "rate"),
    ("achieved/s", "achieved_rate"),
    ("trigger s", "trigger_seconds"),
    ("events", "events"),
    ("p50 ms", "p50_ms"),
    ("p95 ms", "p95_ms"),
    ("p99 ms", "p99_ms"),
    ("max ms", "max_ms"),
    ("batches", "batches"),
    ("batch p50 s", "batch_p50_s"),
    ("warm-up s", "warmup_s"),
    ("driver CPU %", "cpu_percent"),
    ("dup", "duplicates"),
    ("missing", "missing"),
)


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.1f}" if value >= 10 else f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


PROBE_COLUMNS = (
    ("rate/s", "rate"),
    ("achieved/s", "achieved_rate"),
    ("first quarter p50 ms", "first_p50_ms"),
    ("last quarter p50 ms", "last_p50_ms"),
    ("p99 ms", "p99_ms"),
    ("kept up", "kept_up"),
)


def report(
    results: list[Latency], found: list[dict[str, Any]], probes: Sequence[Probe] = ()
) -> str:
    """The search for the maximum (when run), the table, then the targets."""
    lines = []
    if probes:
        lines.append("## the highest rate exactly-once keeps up with (search, in order)\n")
        rows = [[_cell(getattr(p, key)) for _, key in PROBE_COLUMNS] for p in probes]
        lines.append(markdown([header for header, _ in PROBE_COLUMNS], rows))
        lines.append("")
    cells = [[_cell(getattr(r, key)) for _, key in COLUMNS] for r in results]
    lines.append(markdown([header for header, _ in COLUMNS], cells))
    parts = (*SPARK_PARTS, "triggerExecution", *EO_PARTS)
    lines.append("\n## where a batch's time goes (p50 ms of the measured window's batches)\n")
    lines.append(
        markdown(
            ["variant", "rate/s", *parts],
            [
                [r.variant, f"{r.rate:,}", *(_cell(r.parts_ms.get(p, math.nan)) for p in parts)]
                for r in results
            ],
        )
    )
    if found:
        lines.append("\n## targets (issue 31)\n")
        rows = [
            [t["target"], _cell(float(t["value"])), "met" if t["met"] else "MISSED"] for t in found
        ]
        lines.append(markdown(["target", "measured", ""], rows))
    return "\n".join(lines)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.latency",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--rates",
        help="comma-separated events per second (default 1000,5000; none with --find-max)",
    )
    parser.add_argument(
        "--find-max",
        metavar="LOW:HIGH",
        help="first search the highest rate exactly-once keeps up with between LOW and HIGH "
        "events/s (probes of --probe-seconds), then run every variant at half of it and at 70 %% "
        "of it (and at --rates); the trigger + 1 s target is checked at that half",
    )
    parser.add_argument("--probe-seconds", type=float, default=30, help="measured s per probe")
    parser.add_argument("--probe-warmup", type=float, default=10, help="warm-up s per probe")
    parser.add_argument(
        "--precision", type=float, default=0.1, help="search until HIGH/LOW <= 1 + this"
    )
    parser.add_argument("--seconds", type=float, default=60, help="measured seconds per rate")
    parser.add_argument(
        "--warmup", type=float, default=20, help="seconds produced before the window, at least"
    )
    parser.add_argument(
        "--max-warmup",
        type=float,
        default=120,
        help="seconds the warm-up may run while the driver drains its start-up backlog",
    )
    parser.add_argument("--trigger-seconds", type=int, default=1, help="triggerIntervalSeconds")
    parser.add_argument(
        "--max-rate",
        type=int,
        help="the measured exactly-once maximum (bench.compare --source kafka), events/s: the "
        "trigger + 1 s target is checked at half of it (a rate of exactly max/2 must be run)",
    )
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--kafka-partitions", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=2, help="writer tasks per batch")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--memory", default="1g")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    default_rates = "" if args.find_max else "1000,5000"
    args.rates = [int(r) for r in (args.rates or default_rates).split(",") if r]
    args.variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown or min(args.rates, default=1) < 1 or args.seconds <= 0:
        parser.error(f"variants from {VARIANTS}, rates >= 1 and --seconds > 0 ({unknown})")
    if args.find_max:
        low, _, high = args.find_max.partition(":")
        if not (low.isdigit() and high.isdigit() and 0 < int(low) < int(high)):
            parser.error(f"--find-max LOW:HIGH with 0 < LOW < HIGH, got {args.find_max!r}")
        if args.max_rate is not None:
            parser.error("--find-max measures the maximum: leave --max-rate out")
        args.find_max = (int(low), int(high))
    return args


def main(argv: list[str] | None = None) -> int:
    """Every variant at every rate, one after the other (the order alternates per rate)."""
    args = _parse(argv)
    from tests.support.kafka import KafkaBroker, broker_jars_dir

    work = Path(tempfile.mkdtemp(prefix="eo-latency-"))
    results: list[Latency] = []
    probes: list[Probe] = []
    max_rate: int | None = args.max_rate
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(temporary_server(settings=SETTINGS))
        (work / "kafka").mkdir()
        broker: kafka_input.Broker = stack.enter_context(
            KafkaBroker(work / "kafka", broker_jars_dir())
        )
        if args.find_max:
            low, high = args.find_max
            say(f"latency: the highest rate exactly-once keeps up with, {low:,}-{high:,}/s")
            probing = argparse.Namespace(
                **{**vars(args), "seconds": args.probe_seconds, "warmup": args.probe_warmup}
            )
            max_rate, probes = find_max(
                lambda r: measure(server, broker, "exactly-once", r, probing, work / f"max-{r}"),
                low,
                high,
                args.precision,
            )
            if max_rate is None:
                return conclude(
                    work, [f"exactly-once does not keep up even with {low:,}/s"], keep=args.keep
                )
            args.rates = sorted({*args.rates, max_rate // 2, round(max_rate * 0.7)})
            say(f"latency: maximum {max_rate:,}/s; running at {args.rates}")
        for turn, rate in enumerate(args.rates):
            order = args.variants if turn % 2 == 0 else args.variants[::-1]
            for variant in order:
                say(f"latency: {variant} at {rate:,} events/s")
                result, _ = measure(server, broker, variant, rate, args, work / f"{variant}-{rate}")
                say(f"  p50 {result.p50_ms:.0f} ms, p99 {result.p99_ms:.0f} ms")
                results.append(result)
    found = targets(results, max_rate)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(report(results, found, probes))
    if args.json:
        doc = {
            "schema": "eo-latency/1",
            "runs": [{**asdict(r), "exact": r.exact} for r in results],
            "targets": found,
            "max_rate": max_rate,
            "max_search": [asdict(p) for p in probes],
        }
        args.json.write_text(json.dumps(doc, indent=2))
    failed = [
        f"{r.variant} at {r.rate}/s: {r.duplicates} duplicates, {r.missing} missing"
        for r in results
        if not r.exact
    ] + [f"max search at {p.rate}/s: not every event exactly once" for p in probes if not p.exact]
    return conclude(work, failed, keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
