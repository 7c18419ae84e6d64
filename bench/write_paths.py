"""The writer task's candidates for Arrow -> PostgreSQL, on the same data, in one Spark session.

``python -m bench.write_paths --rows 1000000`` generates the bench's orders (JSON lines, 10,000
per file), reads them as one static DataFrame with the declared schema, coalesces it to the
writer tasks' count and times each candidate (median of ``--repeat`` runs after one warm-up,
the candidates interleaved so that the JIT's warming is shared):

- ``noop``: Spark reads and parses, writes nothing (the engine's ceiling);
- ``arrow``: the batch crosses to Python as Arrow record batches, which are dropped (what
  ``mapInArrow`` itself costs);
- ``csv``: Arrow's C++ CSV writer into ``COPY ... (FORMAT csv)``;
- ``binary``: pgpq's encoder into ``COPY ... (FORMAT binary)``;
- ``eo``: eo's own writer body (``arrow_copy.arrow_body`` through ``PostgresWriter``), which
  picks binary or CSV from the table's column types.

Every writing candidate's table is checked after each run (row count and distinct orders): a
candidate that loses or repeats a row fails the bench (exit 1). This is how the write path was
chosen (bench/README.md, "What was profiled").
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pgpq
import psycopg
import pyarrow as pa  # type: ignore[import-untyped]
from psycopg import sql
from pyspark.sql import DataFrame, SparkSession

from bench import data
from bench.variants import TABLE
from eo_jobs.pgserver import temporary_server
from eo_jobs.runtime.session import WRITE_PATH_CONF
from eo_jobs.sinks.postgres.writer import PostgresWriter, table_identifier

RESULT = "n long"
EVENTS_PER_FILE = 10_000
"""As ``bench.compare``: a 1,000,000-row batch is 100 files."""


def _statement(template: str) -> sql.Composed:
    """``template`` with the bench table's quoted name in its one ``{}``."""
    return sql.SQL(template).format(table_identifier(TABLE))


def _done(rows: int) -> Iterator[Any]:
    yield pa.RecordBatch.from_pydict({"n": [rows]})


def arrow_only(batches: Iterable[Any]) -> Iterator[Any]:
    """Receive the record batches and drop them."""
    return _done(sum(batch.num_rows for batch in batches))


def forced(dsn: str, form: str) -> Callable[[Iterable[Any]], Iterator[Any]]:
    """One format whatever the table, through eo's own copy loops; one transaction per task."""

    def run(batches: Iterable[Any]) -> Iterator[Any]:
        from eo_jobs.sinks.postgres import arrow_copy

        statement = _statement("COPY {} FROM STDIN (FORMAT " + form + ")")
        with psycopg.connect(dsn) as conn, conn.cursor() as cur, cur.copy(statement) as copy:
            if form == "csv":
                return _done(arrow_copy.copy_csv(copy, batches))
            first = next(iter(batches), None)
            if first is None:
                return _done(0)
            encoder = pgpq.ArrowToPostgresBinaryEncoder(first.schema)
            return _done(arrow_copy.copy_binary(copy, encoder, itertools.chain([first], batches)))

    return run


def eo_body(dsn: str) -> Callable[[Iterable[Any]], Iterator[Any]]:
    """eo's writer body, committed (no PREPARE: the protocol is measured elsewhere)."""
    writer = PostgresWriter(dsn=dsn, table=TABLE, columns=data.COLUMNS)

    def run(batches: Iterable[Any]) -> Iterator[Any]:
        from eo_jobs.sinks.postgres.arrow_copy import arrow_body

        rows = writer.write_with(arrow_body(writer, batches), gid=None, pipeline="b", batch_id=0)
        return _done(rows)

    return run


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.write_paths", description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000, help="orders in the batch")
    parser.add_argument("--repeat", type=int, default=4, help="timed runs per candidate")
    parser.add_argument("--partitions", type=int, default=2, help="writer tasks")
    parser.add_argument("--cores", type=int, default=2, help="local[cores]")
    parser.add_argument(
        "--arrow-batch",
        type=int,
        default=int(WRITE_PATH_CONF["spark.sql.execution.arrow.maxRecordsPerBatch"]),
        help="maxRecordsPerBatch (default: eo's)",
    )
    return parser.parse_args(argv)


def _session(args: argparse.Namespace) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = {
        **WRITE_PATH_CONF,
        "spark.master": f"local[{args.cores}]",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(args.arrow_batch),
    }
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _check(dsn: str, rows: int) -> str | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            _statement("SELECT count(*), count(DISTINCT order_id) FROM {}")
        ).fetchone()
        conn.execute(_statement("TRUNCATE {}"))
    if found != (rows, rows):
        return f"expected {rows} distinct rows, found {found}"
    return None


def main(argv: list[str] | None = None) -> int:
    """Time every candidate; print a table; exit 1 if a writing one lost or repeated a row."""
    args = _parse(argv)
    with tempfile.TemporaryDirectory(prefix="eo-write-paths-") as work:
        folder = Path(work) / "events"
        data.write_events(folder, args.rows, max(1, args.rows // EVENTS_PER_FILE))
        spark = _session(args)
        with temporary_server() as server:
            dsn = server.dsn()
            data.create_table(dsn, TABLE)

            def frame() -> DataFrame:
                read = spark.read.schema(data.SCHEMA_DDL).json(str(folder))
                return read.coalesce(args.partitions)

            def mapped(fn: Callable[[Iterable[Any]], Iterator[Any]]) -> Callable[[], object]:
                return lambda: frame().mapInArrow(fn, RESULT).collect()

            candidates: dict[str, tuple[Callable[[], object], bool]] = {
                "noop": (lambda: frame().write.format("noop").mode("overwrite").save(), False),
                "arrow": (mapped(arrow_only), False),
                "csv": (mapped(forced(dsn, "csv")), True),
                "binary": (mapped(forced(dsn, "binary")), True),
                "eo": (mapped(eo_body(dsn)), True),
            }
            times: dict[str, list[float]] = {name: [] for name in candidates}
            errors: list[str] = []
            for run in range(args.repeat + 1):
                for name, (work_fn, writes) in candidates.items():
                    started = time.perf_counter()
                    work_fn()
                    if run:
                        times[name].append(time.perf_counter() - started)
                    problem = _check(dsn, args.rows) if writes else None
                    if problem:
                        errors.append(f"{name}: {problem}")
        spark.stop()
    print(
        f"{args.rows:,} rows, {args.partitions} writer tasks, local[{args.cores}], "
        f"Arrow batches of {args.arrow_batch:,}; median of {args.repeat} runs after a warm-up"
    )
    print("| candidate | median s | rows/s |")
    print("|---|---:|---:|")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.2f} | {args.rows / median:,.0f} |")
    for error in errors:
        print(f"LOST OR REPEATED: {error}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
