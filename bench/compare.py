"""eo against Spark's JDBC writer and the two ceilings, at several batch sizes, in one run.

``python -m bench.compare --sizes small,medium,large`` generates the events once, starts one
embedded PostgreSQL, and at each batch size runs every variant (``bench/variants.py``: eo
exactly-once, at-least-once and idempotent upsert, Spark's JDBC writer, Spark into ``noop``,
raw ``COPY``) against its own fresh database, rotating the order on each repeat; every table is
audited against the events. Then, without Spark, the protocol's own costs
(``bench/protocol.py``), and one SIGKILL of a real driver with its restart
(``bench/recovery.py``).

``exactly-once-mysql`` and ``spark-jdbc-mysql`` (issue 29) write into a MariaDB server the bench
starts when either is chosen (``bench/mysql_sink.py``): eo's MySQL sink against Spark's JDBC
writer into the same server, the same events and Spark settings; ratio ``EO/JDBC (mysql)``.

Sizes: ``small`` (20,000 rows per batch), ``medium`` (200,000), ``large`` (1,000,000), or
``ROWSxBATCHES`` such as ``2000x3``, or ``ROWSxBATCHES:WARMUP`` to leave the first WARMUP
batches (1 otherwise) out of the steady rate (``medium`` is ``200000x60:30``: see ``PRESETS``);
``--events/--files/--files-per-trigger`` still describe one size the old way.

``--source kafka`` (issue 31): the Spark variants read a Kafka topic instead of the files, the
same events produced before the run into one topic per size on a KRaft broker the bench starts
(``bench/kafka_input.py``), a batch cut by ``maxOffsetsPerTrigger``; the raw ``COPY`` ceiling
and the kill test still read the files (neither has a source to change), and the targets are
issue 31's.

Exit code 0 when every driver exited 0, every exactly-once run (and the kill test) is exact,
no variant that writes lost or changed a row, and the in-doubt resolution was exact. Targets
(issue 13) are reported, never enforced: a miss is a finding, not a broken bench.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench import copy_ceiling, data, kafka_input, mysql_sink, protocol, recovery, runner
from bench.variants import (
    BY_NAME,
    REPO,
    TOTALS_TABLE,
    VARIANTS,
    Shape,
    Variant,
    command,
    environment,
    mariadb_jdbc_jars,
    mariadb_jdbc_version,
    pgjdbc_jars,
    pgjdbc_version,
    pipeline_file,
)
from eo_jobs import mariadbserver
from eo_jobs.mariadbserver import MariaDbServer
from eo_jobs.pgserver import PgServer, temporary_server

JSON_SCHEMA = "eo-bench/2"
"""Bumped whenever a JSON field is renamed or changes meaning (``bench/README.md`` lists them)."""
PRESETS = {
    "small": (20_000, 10, 1),
    "medium": (200_000, 60, 30),
    "large": (1_000_000, 10, 2),
}
"""Name -> (rows per batch, batches, warm-up batches left out of the steady rate).

The first batch carries the warm-up every variant pays once (Python workers, class loading).
At 200,000 rows the JIT keeps compiling Spark's planner for some 40 batches: eo's cycle went
0.55 / 0.51 / 0.49 / 0.48 / 0.46 s over batches 5-19 / 20-29 / 30-39 / 40-49 / 50-58 while the
JDBC job's stayed at ~1.0 s from batch 5 (5 interleaved 60-batch runs of each,
bench/README.md), so an 8-batch window measured eo mid warm-up: 1.9x where the second half of
60 batches gave 1.97-2.19x in five bench runs. ``medium`` therefore measures the second half of 60
batches, every variant alike; ``rows_per_s_whole`` (every batch) is still reported next to it.
``small`` keeps the one-batch warm-up. ``large`` was 4 batches with one left out until
2026-11-29: three 1,000,000-row batches from Kafka varied by +-10 % (5.92-7.18 s for eo, the
last one slowest for every variant), which put EO/JDBC at 1.97 in one run; 10 batches with the
first 2 left out gave 2.35 with every batch of eo's window within 4.1-5.8 s (bench/README.md,
"From Kafka"). 60 batches of it would take the default run past 20 minutes (a 1,000,000-row
JDBC batch takes ~5 s from files, ~12 s from Kafka). The default run (15 Spark drivers, each
~15 s of JVM start) took ~10 minutes here with the 4-batch ``large`` (`--repeat 2`: 17.8
minutes).
"""
EVENTS_PER_FILE = 10_000
PHASE2_PARTITIONS = (1, 4, 16, 64)
PHASE2_SINKS = (1, 2)
RATIOS = (
    ("eo_alo", "at-least-once"),
    ("eo_jdbc", "spark-jdbc"),
    ("eo_noop", "spark-noop"),
    ("eo_copy", "copy"),
)
"""JSON key -> the variant exactly-once's rows/s is divided by."""
TOTALS_RATIO = "totals_eo"
"""JSON key of the accumulate variant's rows/s over exactly-once's: what a running-totals sink
beside the ledger costs (issue 30)."""
SUMS_RATIO = "sums_eo"
"""JSON key of the sum-columns variant's rows/s over exactly-once's: what recording each
batch's sums for the audit costs (issue 28)."""
MYSQL_RATIO = "mysql_eo_jdbc"
"""JSON key of ``exactly-once-mysql``'s rows/s over ``spark-jdbc-mysql``'s: eo's MySQL sink
against Spark's JDBC writer into the same MariaDB (issue 29, target >= 1.0 at 200k)."""
RATIO_LABELS = {
    "eo_alo": "EO/ALO",
    "eo_jdbc": "EO/JDBC",
    "eo_noop": "EO/noop",
    "eo_copy": "EO/COPY",
    MYSQL_RATIO: "EO/JDBC (mysql)",
}


@dataclass(frozen=True)
class Size:
    """One batch size: how many rows each batch gets and how many batches run."""

    name: str
    rows_per_batch: int
    batches: int
    events_per_file: int
    warmup: int = 1
    """Batches left out of the steady rate (``ROWSxBATCHES:WARMUP``; ``PRESETS`` name theirs)."""

    @property
    def files_per_trigger(self) -> int:
        """``maxFilesPerTrigger``: batches are cut by files."""
        return self.rows_per_batch // self.events_per_file

    @property
    def files(self) -> int:
        """Input files of this size."""
        return self.files_per_trigger * self.batches

    @property
    def events(self) -> int:
        """Orders 0 .. events-1 are its input."""
        return self.rows_per_batch * self.batches


@dataclass(frozen=True)
class Measured:
    """One run of one variant at one size: timings from the outside, audit of its table."""

    variant: str
    size: str
    code: int
    wall: float
    streaming: float
    steady: float
    batch_seconds: tuple[float, ...]
    protocol_ms: tuple[float, ...]
    audit: data.Audit | None
    """None for ``spark-noop`` (it writes nothing)."""
    load: float
    """1-minute load average when the run started."""
    log: str

    def problem(self, batches: int) -> str | None:
        """Why this run fails the bench (None when it does not)."""
        variant = BY_NAME[self.variant]
        if self.code != 0:
            return f"exit {self.code} (log {self.log})"
        if len(self.batch_seconds) != batches:
            return f"{len(self.batch_seconds)} batches timed, {batches} expected (log {self.log})"
        if self.audit is None:
            return None
        if variant.two_phase and not self.audit.exact:
            return f"not exact: {self.audit}"
        if self.audit.missing or self.audit.wrong or self.audit.unexpected:
            return f"lost or changed rows: {self.audit}"
        return None


@dataclass
class Results:
    """Everything measured."""

    environment: dict[str, Any]
    measured: dict[str, dict[str, list[Measured]]] = field(default_factory=dict)
    phase2: list[protocol.Phase2] = field(default_factory=list)
    in_doubt: protocol.InDoubt | None = None
    recovery: recovery.Recovery | None = None


def _sizes(value: str, events_per_file: int) -> list[Size]:
    sizes: list[Size] = []
    for item in value.split(","):
        name = item.strip()
        if name in PRESETS:
            rows, batches, warmup = PRESETS[name]
        else:
            shape, _, warmup_text = name.partition(":")
            rows_text, _, batches_text = shape.partition("x")
            try:
                rows, batches = int(rows_text), int(batches_text or "3")
                warmup = int(warmup_text or "1")
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"size {name!r}: use small, medium, large or ROWSxBATCHES[:WARMUP]"
                ) from None
        per_file = min(events_per_file, rows)
        if rows < 1 or batches < 1 or rows % per_file:
            raise argparse.ArgumentTypeError(
                f"size {name!r}: rows per batch must be a positive multiple of "
                f"--events-per-file ({per_file})"
            )
        if warmup != 1 and not 1 <= warmup < batches:
            raise argparse.ArgumentTypeError(
                f"size {name!r}: the warm-up must leave at least one of its {batches} batches "
                "to measure (1 <= WARMUP < BATCHES)"
            )
        sizes.append(Size(name, rows, batches, per_file, warmup))
    return sizes


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--sizes",
        default="small,medium,large",
        help="comma-separated batch sizes: small, medium, large or ROWSxBATCHES[:WARMUP]",
    )
    parser.add_argument("--events-per-file", type=int, default=EVENTS_PER_FILE)
    parser.add_argument("--events", type=int, help="one size the old way: order events")
    parser.add_argument("--files", type=int, help="... spread over this many files")
    parser.add_argument("--files-per-trigger", type=int, help="... maxFilesPerTrigger")
    parser.add_argument("--partitions", type=int, default=2, help="writer tasks per batch")
    parser.add_argument("--repeat", type=int, default=1, help="runs of every variant per size")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2, help="local[cores]")
    parser.add_argument("--memory", default="1g", help="driver memory")
    parser.add_argument(
        "--variants",
        default=",".join(v.name for v in VARIANTS),
        help="comma-separated subset of: " + ", ".join(BY_NAME) + " (empty: none)",
    )
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per driver run")
    parser.add_argument("--phase2-partitions", default=",".join(map(str, PHASE2_PARTITIONS)))
    parser.add_argument("--phase2-sinks", default=",".join(map(str, PHASE2_SINKS)))
    parser.add_argument("--phase2-batches", type=int, default=5, help="batches per shape")
    parser.add_argument("--in-doubt", type=int, default=1000, help="transactions to resolve")
    parser.add_argument("--no-protocol", action="store_true", help="skip the Spark-free part")
    parser.add_argument(
        "--recovery-size",
        default="20000x6",
        help="input of the SIGKILL test (ROWSxBATCHES); 'none' skips it",
    )
    parser.add_argument(
        "--source",
        choices=("files", "kafka"),
        default="files",
        help="what every Spark variant reads: JSON files, or a Kafka topic of a broker the "
        "bench starts (the same events; a batch cut by maxOffsetsPerTrigger)",
    )
    parser.add_argument(
        "--kafka-partitions", type=int, default=4, help="partitions of each size's topic"
    )
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the work folder and logs")
    args = parser.parse_args(argv)
    names = [n for n in args.variants.split(",") if n]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; choose from {list(BY_NAME)}")
    args.chosen = [BY_NAME[n] for n in names]
    if (
        min(
            args.partitions,
            args.repeat,
            args.events_per_file,
            args.phase2_batches,
            args.kafka_partitions,
        )
        < 1
    ):
        parser.error(
            "--partitions, --repeat, --events-per-file, --phase2-batches, --kafka-partitions "
            "must be >= 1"
        )
    try:
        _derive(args)
    except (argparse.ArgumentTypeError, ValueError) as exc:
        parser.error(str(exc))
    return args


def _derive(args: argparse.Namespace) -> None:
    """Sizes, the recovery input and the phase-2 shapes from the flags (ValueError: bad)."""
    if args.events is not None or args.files is not None or args.files_per_trigger:
        events = args.events or 200_000
        files = args.files or 20
        per_trigger = args.files_per_trigger or 2
        if events % files or files % per_trigger or min(events, files, per_trigger) < 1:
            raise ValueError("--events must split evenly into --files, and those into batches")
        per_file = events // files
        args.sizes = [Size("custom", per_file * per_trigger, files // per_trigger, per_file)]
    else:
        args.sizes = _sizes(args.sizes, args.events_per_file)
    args.recovery = (
        None
        if args.recovery_size == "none"
        else _sizes(args.recovery_size, args.events_per_file)[0]
    )
    # One set of files serves every size: they must agree on the events per file.
    everything = args.sizes + ([args.recovery] if args.recovery else [])
    per_file = min(s.events_per_file for s in everything)
    if any(s.rows_per_batch % per_file for s in everything):
        raise ValueError(f"every batch size must be a multiple of {per_file} events per file")
    args.sizes = [replace(s, events_per_file=per_file) for s in args.sizes]
    if args.recovery:
        args.recovery = replace(args.recovery, events_per_file=per_file)
    args.phase2_partitions = [int(x) for x in args.phase2_partitions.split(",") if x]
    args.phase2_sinks = [int(x) for x in args.phase2_sinks.split(",") if x]


def say(message: str) -> None:
    """Progress, on stderr (stdout carries the report)."""
    print(f"bench: {message}", file=sys.stderr, flush=True)


def settle(server: PgServer) -> None:
    """Flush what the runs before wrote (``CHECKPOINT``), so that no run pays for them.

    Every run shares one server. Without this, the checkpointer writes the dirty pages and WAL
    of the runs before (gigabytes at 200,000 rows per batch) while the next one runs: in the
    run of 2026-11-26 14:07 every variant that ran late in its repeat was slower than in the
    repeat where it ran early (JDBC 30.5 vs 28.1 s, upsert 36.4 vs 27.5 s).
    """
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def measure(
    server: PgServer,
    variant: Variant,
    size: Size,
    shape: Shape,
    folder: Path,
    csv: copy_ceiling.CsvFile | None,
    timeout: float,
    mariadb: MariaDbServer | None = None,
) -> Measured:
    """Run one variant against a new database and audit what it wrote.

    A MySQL variant writes into ``mariadb``'s ``bench.orders``, dropped and created again for
    the run; its PostgreSQL database is eo's control database (the JDBC job only reads the
    pipeline file that names it)."""
    folder.mkdir(parents=True)
    settle(server)
    # One database per run: size and variant and repeat in its name.
    database = f"{size.name}_{folder.name}".replace("-", "_")
    dsn = server.create_database(database)
    jdbc_url = f"jdbc:postgresql://127.0.0.1:{server.port}/{database}"
    sink: mysql_sink.SinkTable | None = None
    if variant.database == "mysql":
        if mariadb is None:
            raise ValueError(f"variant {variant.name} needs the bench's MariaDB server")
        sink = mysql_sink.fresh_table(mariadb)
        shape = replace(shape, mysql_table=sink.name)
        jdbc_url = sink.jdbc_url
    else:
        data.create_table(dsn, variant.table, key=variant.mode == "upsert")
    if variant.totals:
        data.create_totals_table(dsn, TOTALS_TABLE)
    load = os.getloadavg()[0]
    if variant.spark:
        spec = pipeline_file(folder, variant, shape)
        env = environment(dsn, sink.db.dsn if sink is not None else None)
        run = runner.run(
            command(variant, spec, jdbc_url), env, folder / "driver.log", REPO, timeout
        )
    else:
        assert csv is not None
        run = copy_ceiling.run(
            dsn,
            variant.table,
            csv,
            size.batches,
            size.files_per_trigger,
            shape.partitions,
            folder / "copy.log",
        )
    if run.code != 0:
        say(f"{variant.name} exited {run.code}; last lines of {run.log}:\n{run.tail()}")
    return Measured(
        variant=variant.name,
        size=size.name,
        code=run.code,
        wall=run.wall,
        streaming=run.streaming,
        steady=run.steady_after(size.warmup),
        batch_seconds=tuple(b.seconds for b in run.batches),
        protocol_ms=tuple(b.protocol_ms for b in run.batches if b.protocol_ms is not None),
        audit=_audit(dsn, variant, size, sink) if variant.writes else None,
        load=load,
        log=str(run.log),
    )


def _audit(
    dsn: str, variant: Variant, size: Size, sink: mysql_sink.SinkTable | None = None
) -> data.Audit:
    """The table against the events; the accumulate variant's totals against the table; a
    MySQL variant's table in MariaDB (``sink``)."""
    if sink is not None:
        return mysql_sink.audit(sink, size.events)
    found = data.audit(dsn, variant.table, size.events)
    if variant.sums:
        found = replace(found, sums_wrong=data.sums_wrong(dsn, variant.table))
    if not variant.totals:
        return found
    return replace(found, totals_wrong=data.totals_wrong(dsn, TOTALS_TABLE, variant.table))


def _rate(rows: float, seconds: float) -> float:
    return rows / seconds if seconds > 0 else 0.0


def summarize(size: Size, variant: str, runs: list[Measured]) -> dict[str, Any]:
    """One table row (stable JSON field names): medians over runs, percentiles over batches.

    ``rows_per_s`` is the steady rate: the rows of every batch after the size's warm-up
    (``Size.warmup``: the first batch, or the first 30 of ``medium``'s 60) over the time from
    the end of the last warm-up batch to the end of the last batch (the warm-up carries the JIT
    and Python-worker start, which a long-running pipeline pays once). ``rows_per_s_whole``
    counts every batch.
    """
    batches = [s for r in runs for s in r.batch_seconds]
    protocol_ms = [ms for r in runs for ms in r.protocol_ms]
    steady = [
        _rate(size.rows_per_batch * (len(r.batch_seconds) - size.warmup), r.steady) for r in runs
    ]
    whole = [_rate(size.rows_per_batch * len(r.batch_seconds), r.streaming) for r in runs]
    audits = [r.audit for r in runs if r.audit is not None]
    return {
        "variant": variant,
        "size": size.name,
        "rows_per_batch": size.rows_per_batch,
        "events": size.events,
        "runs": len(runs),
        "batches": len(batches) // len(runs),
        "warmup_batches": size.warmup,
        "rows_per_s": statistics.median(steady),
        "best_rows_per_s": max(steady),
        "rows_per_s_whole": statistics.median(whole),
        "wall_s": statistics.median(r.wall for r in runs),
        "streaming_s": statistics.median(r.streaming for r in runs),
        "steady_s": statistics.median(r.steady for r in runs),
        "batch_p50_s": runner.percentile(batches, 0.50),
        "batch_p95_s": runner.percentile(batches, 0.95),
        "first_batch_s": statistics.median(r.batch_seconds[0] for r in runs if r.batch_seconds)
        if batches
        else None,
        "decide_commit_p50_ms": runner.percentile(protocol_ms, 0.50) if protocol_ms else None,
        "duplicates": max((a.duplicates for a in audits), default=None),
        "missing": max((a.missing for a in audits), default=None),
        "wrong": max((a.wrong + a.unexpected + a.totals_wrong for a in audits), default=None),
        "in_doubt": max((a.in_doubt for a in audits), default=None),
        "exact": all(a.exact for a in audits) if audits else None,
        "load_1m": statistics.mean(r.load for r in runs),
    }


def ratios(rows: list[dict[str, Any]], key: str) -> dict[str, float | None]:
    """exactly-once's rate over each baseline's (``key``: ``rows_per_s`` or ``..._whole``)."""
    by = {row["variant"]: row[key] for row in rows}
    eo = by.get("exactly-once")
    found = {
        name: (eo / by[other] if eo is not None and by.get(other) else None)
        for name, other in RATIOS
    }
    totals = by.get("accumulate")
    found[TOTALS_RATIO] = totals / eo if totals is not None and eo else None
    sums = by.get("sum-columns")
    found[SUMS_RATIO] = sums / eo if sums is not None and eo else None
    eo_mysql, jdbc_mysql = by.get("exactly-once-mysql"), by.get("spark-jdbc-mysql")
    found[MYSQL_RATIO] = eo_mysql / jdbc_mysql if eo_mysql is not None and jdbc_mysql else None
    return found


TARGETS = (
    ("EO/JDBC >= 2.0 at 200k rows per batch", "medium", "eo_jdbc", 2.0),
    ("EO/JDBC >= 2.0 at 1M rows per batch", "large", "eo_jdbc", 2.0),
    ("EO/JDBC >= 1.0 at 20k rows per batch", "small", "eo_jdbc", 1.0),
    ("EO/ALO >= 0.9 at 20k rows per batch", "small", "eo_alo", 0.9),
    ("EO/ALO >= 0.9 at 200k rows per batch", "medium", "eo_alo", 0.9),
    ("EO/ALO >= 0.9 at 1M rows per batch", "large", "eo_alo", 0.9),
    ("EO/noop >= 0.3 at 1M rows per batch", "large", "eo_noop", 0.3),
    ("MySQL: EO/JDBC >= 1.0 at 200k rows per batch (issue 29)", "medium", MYSQL_RATIO, 1.0),
)


KAFKA_TARGETS = (
    ("Kafka: EO/ALO >= 0.9 at 200k rows per batch", "medium", "eo_alo", 0.9),
    ("Kafka: EO/ALO >= 0.9 at 1M rows per batch", "large", "eo_alo", 0.9),
    ("Kafka: EO/JDBC >= 2.0 at 200k rows per batch", "medium", "eo_jdbc", 2.0),
    ("Kafka: EO/JDBC >= 2.0 at 1M rows per batch", "large", "eo_jdbc", 2.0),
    ("Kafka: EO/noop >= 0.6 at 1M rows per batch", "large", "eo_noop", 0.6),
)
"""Issue 31's targets, for ``--source kafka``."""


def targets(
    sizes: list[dict[str, Any]], results: Results, source: str = "files"
) -> list[dict[str, Any]]:
    """The targets (issue 13 for files, issue 31 for Kafka) this run measured: value, threshold,
    met."""
    found: list[dict[str, Any]] = []
    by_size = {s["size"]: s for s in sizes}
    for name, size, ratio, threshold in KAFKA_TARGETS if source == "kafka" else TARGETS:
        value = by_size.get(size, {}).get("ratios", {}).get(ratio)
        if value is not None:
            found.append(
                {"target": name, "value": value, "threshold": threshold, "met": value >= threshold}
            )
    if results.in_doubt is not None and results.in_doubt.transactions == 1000:
        value = results.in_doubt.seconds
        found.append(
            {
                "target": "1,000 in-doubt resolved < 2 s",
                "value": value,
                "threshold": 2.0,
                "met": value < 2.0,
            }
        )
    if results.recovery is not None:
        value = results.recovery.fence_resolve_s
        found.append(
            {
                "target": "fence + resolve < 1 s",
                "value": value,
                "threshold": 1.0,
                "met": value < 1.0,
            }
        )
    return found


def _cell(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:,.0f}" if value >= 1000 else f"{value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def markdown(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table, padded (it pastes into bench/README.md as is)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        padded = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("| " + " | ".join(padded) + " |")
    return "\n".join(lines)


VARIANT_COLUMNS = (
    ("variant", "variant"),
    ("rows/s", "rows_per_s"),
    ("rows/s whole run", "rows_per_s_whole"),
    ("batches", "batches"),
    ("first batch s", "first_batch_s"),
    ("batch p50 s", "batch_p50_s"),
    ("decide+commit p50 ms", "decide_commit_p50_ms"),
    ("dup", "duplicates"),
    ("missing", "missing"),
    ("wrong", "wrong"),
    ("prepared left", "in_doubt"),
    ("load 1m", "load_1m"),
)


def machine(server: PgServer, mariadb: MariaDbServer | None = None) -> dict[str, Any]:
    """What the figures depend on: cores, memory, load, versions (MariaDB's when it runs)."""
    with psycopg.connect(server.dsn()) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    found = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": os.cpu_count(),
        "memory_gib": round(memory, 1),
        "load_average_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "python": platform.python_version(),
        "pyspark": importlib.metadata.version("pyspark"),
        "pyarrow": importlib.metadata.version("pyarrow"),
        "psycopg": importlib.metadata.version("psycopg"),
        "java": (java.stderr.splitlines() or ["?"])[0],
        "postgresql": row[0] if row else "?",
        "postgresql_jdbc": pgjdbc_version(),
    }
    if mariadb is not None:
        found["mariadb"] = mysql_sink.version(mariadb)
        found["mariadb_jdbc"] = mariadb_jdbc_version()
        found["pymysql"] = importlib.metadata.version("PyMySQL")
    return found


def run_all(args: argparse.Namespace, work: Path) -> Results:
    """Generate the input, then every measurement on one server (see the module)."""
    sizes: list[Size] = args.sizes
    per_file = sizes[0].events_per_file
    wanted = [s.files for s in sizes] + ([args.recovery.files] if args.recovery else [])
    events = work / "events"
    files = max(wanted)
    say(f"writing {files * per_file:,} events into {files} files under {events}")
    data.write_events(events, files * per_file, files)
    csv = None
    if any(v.kind == "copy" for v in args.chosen):
        csv = copy_ceiling.write_csv(work / "events.csv", files, per_file)
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(temporary_server(settings=protocol.SETTINGS))
        broker = _broker(stack, work) if args.source == "kafka" else None
        mariadb = None
        if any(v.database == "mysql" for v in args.chosen):
            say("starting a MariaDB server")
            mariadb = mariadbserver.temporary_server(settings=mysql_sink.SETTINGS)
            stack.callback(mariadb.remove)
        results = Results(machine(server, mariadb))
        if not args.no_protocol:
            say(
                f"protocol: decide+commit at partitions {args.phase2_partitions} x sinks "
                f"{args.phase2_sinks}"
            )
            results.phase2 = protocol.phase2(
                server, args.phase2_partitions, args.phase2_sinks, args.phase2_batches
            )
            if args.in_doubt:
                say(f"protocol: resolving {args.in_doubt:,} in-doubt transactions")
                results.in_doubt = protocol.in_doubt(server, args.in_doubt)
        chosen: list[Variant] = args.chosen
        for size in sizes:
            source = work / size.name / "in"
            data.link_events(events, source, size.files)
            shape = Shape(source, size.files_per_trigger, args.partitions, args.cores, args.memory)
            if broker is not None:
                shape = replace(shape, kafka=_topic(broker, size, args.kafka_partitions))
            measured: dict[str, list[Measured]] = {v.name: [] for v in chosen}
            for repeat in range(args.repeat if chosen else 0):
                turn = repeat % len(chosen)
                for variant in chosen[turn:] + chosen[:turn]:
                    say(
                        f"{size.name} ({size.rows_per_batch:,} rows x {size.batches}), "
                        f"run {repeat + 1}: {variant.name}"
                    )
                    folder = work / size.name / f"{variant.name}-{repeat}"
                    result = measure(
                        server, variant, size, shape, folder, csv, args.timeout, mariadb
                    )
                    say(
                        f"  exit {result.code}, wall {result.wall:.1f} s, streaming "
                        f"{result.streaming:.1f} s, steady {result.steady:.1f} s, {result.audit}"
                    )
                    measured[variant.name].append(result)
            results.measured[size.name] = measured
        if args.recovery is not None:
            size = args.recovery
            source = work / "recovery" / "in"
            data.link_events(events, source, size.files)
            shape = Shape(source, size.files_per_trigger, args.partitions, args.cores, args.memory)
            say(
                "recovery: SIGKILL of an exactly-once driver "
                f"({size.rows_per_batch:,} rows x {size.batches})"
            )
            results.recovery = recovery.measure(
                server, shape, work / "recovery" / "run", size.events, args.timeout
            )
            say(f"  {results.recovery}")
    results.environment["load_average_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return results


def _broker(stack: contextlib.ExitStack, work: Path) -> kafka_input.Broker:
    """The KRaft broker the tests use, its data in the work folder, stopped with the stack."""
    from tests.support.kafka import KafkaBroker, broker_jars_dir

    (work / "kafka").mkdir()
    say("starting a Kafka broker (KRaft)")
    broker: kafka_input.Broker = stack.enter_context(KafkaBroker(work / "kafka", broker_jars_dir()))
    return broker


def _topic(broker: kafka_input.Broker, size: Size, partitions: int) -> kafka_input.KafkaTopic:
    """The size's events in a topic of their own (produced before any variant runs)."""
    topic = kafka_input.topic_name(size.name)
    say(f"producing {size.events:,} events into {topic} ({partitions} partitions)")
    seconds = kafka_input.produce_events(broker, topic, size.events, partitions)
    say(f"  produced in {seconds:.1f} s")
    return kafka_input.KafkaTopic(broker.bootstrap_servers, topic, size.rows_per_batch)


def document(args: argparse.Namespace, results: Results) -> dict[str, Any]:
    """The whole result as JSON-ready data (field names are stable: see bench/README.md)."""
    sizes: list[dict[str, Any]] = []
    for size in args.sizes:
        runs = results.measured.get(size.name, {})
        rows = [summarize(size, name, r) for name, r in runs.items() if r]
        sizes.append(
            {
                "size": size.name,
                "rows_per_batch": size.rows_per_batch,
                "batches": size.batches,
                "warmup_batches": size.warmup,
                "events": size.events,
                "files_per_trigger": size.files_per_trigger,
                "variants": rows,
                "ratios": ratios(rows, "rows_per_s"),
                "ratios_whole_run": ratios(rows, "rows_per_s_whole"),
            }
        )
    doc: dict[str, Any] = {
        "schema": JSON_SCHEMA,
        "environment": results.environment,
        "settings": {
            "writer_partitions": args.partitions,
            "spark_master": f"local[{args.cores}]",
            "driver_memory": args.memory,
            "events_per_file": args.sizes[0].events_per_file,
            "repeat": args.repeat,
            "source": args.source,
            "kafka_partitions": args.kafka_partitions if args.source == "kafka" else None,
        },
        "sizes": sizes,
        "protocol": {
            "phase2": [asdict(p) for p in results.phase2],
            "in_doubt": asdict(results.in_doubt) if results.in_doubt else None,
        },
        "recovery": (
            {**asdict(results.recovery), "exact": results.recovery.exact}
            if results.recovery
            else None
        ),
        "runs": {
            size: {name: [asdict(r) for r in runs] for name, runs in by_variant.items()}
            for size, by_variant in results.measured.items()
        },
    }
    doc["targets"] = targets(sizes, results, args.source)
    return doc


def _display(name: str) -> str:
    """A variant's name in the tables (``exactly-once (mysql)`` for ``exactly-once-mysql``)."""
    variant = BY_NAME.get(name)
    return variant.display if variant is not None else name


def _phase2_cell(shape: dict[str, Any]) -> str:
    return f"{shape['decide_commit_ms_p50']:.1f} ({shape['decide_commit_ms_max']:.0f})"


def print_report(doc: dict[str, Any]) -> None:
    """Environment, one table per size with its ratios, the protocol figures, the targets."""
    print("\n".join(f"{key}: {value}" for key, value in doc["environment"].items()))
    settings = doc["settings"]
    source = (
        f"Kafka, {settings['kafka_partitions']} partitions per topic"
        if settings["source"] == "kafka"
        else f"files, {settings['events_per_file']:,} events per file"
    )
    print(
        f"settings: {settings['writer_partitions']} writer tasks per batch, "
        f"{settings['spark_master']}, driver memory {settings['driver_memory']}, "
        f"source {source}, {settings['repeat']} run(s) each"
    )
    for size in doc["sizes"]:
        if not size["variants"]:
            continue
        print(
            f"\n## {size['size']}: {size['rows_per_batch']:,} rows per batch x "
            f"{size['batches']} batches ({size['events']:,} events)\n"
        )
        cells = [
            [
                _cell(_display(row[key]) if key == "variant" else row[key])
                for _, key in VARIANT_COLUMNS
            ]
            for row in size["variants"]
        ]
        print(markdown([h for h, _ in VARIANT_COLUMNS], cells))
        steady, whole = size["ratios"], size["ratios_whole_run"]
        print(
            "\nratios (steady; whole run): "
            + ", ".join(
                f"{RATIO_LABELS[name]} {_cell(steady[name])}; {_cell(whole[name])}"
                for name, _ in RATIOS
            )
            + f", ledger+totals/EO {_cell(steady[TOTALS_RATIO])}; {_cell(whole[TOTALS_RATIO])}"
            + f", EO+sums/EO {_cell(steady[SUMS_RATIO])}; {_cell(whole[SUMS_RATIO])}"
            + f", {RATIO_LABELS[MYSQL_RATIO]} {_cell(steady.get(MYSQL_RATIO))}; "
            + _cell(whole.get(MYSQL_RATIO))
        )
    phase2 = doc["protocol"]["phase2"]
    if phase2:
        sinks = sorted({p["sinks"] for p in phase2})
        parts = sorted({p["partitions"] for p in phase2})
        by = {(p["partitions"], p["sinks"]): p for p in phase2}
        print("\n## decide+commit per batch, ms (p50 of batches; max in brackets), no Spark\n")
        headers = ["writer partitions", *[f"{s} sink{'s' if s > 1 else ''}" for s in sinks]]
        rows = [
            [
                str(p),
                *[_phase2_cell(by[(p, s)]) if (p, s) in by else "-" for s in sinks],
            ]
            for p in parts
        ]
        print(markdown(headers, rows))
    in_doubt = doc["protocol"]["in_doubt"]
    if in_doubt:
        print(
            f"\nin doubt: {in_doubt['transactions']:,} prepared transactions of a dead epoch "
            f"resolved in {in_doubt['seconds']:.2f} s ({in_doubt['committed']} committed, "
            f"{in_doubt['rolled_back']} rolled back, {in_doubt['left']} left; exact: "
            f"{_cell(in_doubt['exact'])})"
        )
    rec = doc["recovery"]
    if rec:
        print(
            f"\nSIGKILL -> first new decided batch: {rec['kill_to_first_batch_s']:.2f} s = "
            f"Spark start-up {rec['spark_startup_s']:.2f} s + fence+resolve "
            f"{rec['fence_resolve_s']:.3f} s ({rec['committed']} committed, "
            f"{rec['rolled_back']} rolled back) + first batch {rec['first_batch_s']:.2f} s "
            f"(its own {rec['first_batch_own_s']:.2f} s); exact after the kill: "
            f"{_cell(rec['exact'])} ({rec['audit']})"
        )
    if doc["targets"]:
        issue = "31" if doc["settings"]["source"] == "kafka" else "13"
        print(f"\n## targets (issue {issue})\n")
        rows = [
            [t["target"], _cell(t["value"], 3), "met" if t["met"] else "MISSED"]
            for t in doc["targets"]
        ]
        print(markdown(["target", "measured", ""], rows))


def failures(args: argparse.Namespace, results: Results) -> list[str]:
    """What makes the bench fail: crashes, inexact exactly-once, lost rows."""
    failed = [
        f"{size.name} {r.variant}: {problem}"
        for size in args.sizes
        for runs in results.measured.get(size.name, {}).values()
        for r in runs
        if (problem := r.problem(size.batches)) is not None
    ]
    if results.in_doubt is not None and not results.in_doubt.exact:
        failed.append(f"in-doubt resolution not exact: {results.in_doubt}")
    if results.recovery is not None and not results.recovery.exact:
        failed.append(f"recovery after SIGKILL not exact: {results.recovery}")
    return failed


def main(argv: list[str] | None = None) -> int:
    """Generate the events, run everything, print the report."""
    args = _parse(argv)
    if any(v.kind == "jdbc" and v.database == "postgres" for v in args.chosen):
        pgjdbc_jars()
    if any(v.kind == "jdbc" and v.database == "mysql" for v in args.chosen):
        mariadb_jdbc_jars()
    work = Path(tempfile.mkdtemp(prefix="eo-bench-"))
    results = run_all(args, work)
    doc = document(args, results)
    print_report(doc)
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2, default=str))
    return conclude(work, failures(args, results), keep=args.keep)


def conclude(work: Path, failed: list[str], *, keep: bool) -> int:
    """Each failure on stdout; the work folder kept when asked or when anything failed (its
    logs are the evidence), removed otherwise; the bench's exit code."""
    for line in failed:
        print(f"FAILED {line}")
    if keep or failed:
        say(f"work folder kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
