"""Where a Kafka micro-batch's read goes: Spark's Kafka reader under consumer settings.

``python -m bench.kafka_read --events 1000000 --partitions 4 --repeat 3`` starts the tests'
KRaft broker, produces the bench's order events once, and times Spark batch reads of the whole
topic into ``noop`` (local[2], 1 GiB, as the bench's drivers), each variant on the same topic,
rounds interleaved, the median reported with its ratio to Kafka's own defaults:

- the values alone (the reader's ceiling: fetch, decode, one row per record);
- the values through ``from_json`` with the declared schema (what every Kafka variant of
  ``bench.compare`` does), with Kafka's consumer defaults, with eo's
  (``runtime.source.KAFKA_READ_DEFAULTS``), and with each of eo's settings alone.

No database, no writer: this says how much of a Kafka batch is the reader's, and what the
consumer settings eo picks buy. The first round is a warm-up and left out.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench import data, kafka_input
from bench.compare import markdown
from eo_jobs.runtime.packages import kafka_connector_jars
from eo_jobs.runtime.source import KAFKA_READ_DEFAULTS

TOPIC = "kafka-read"
POLL = {"kafka.max.poll.records": KAFKA_READ_DEFAULTS["kafka.max.poll.records"]}
FETCH = {"kafka.max.partition.fetch.bytes": KAFKA_READ_DEFAULTS["kafka.max.partition.fetch.bytes"]}


def _variants(
    read: Callable[[dict[str, str]], DataFrame],
) -> dict[str, Callable[[], DataFrame]]:
    def parsed(options: dict[str, str]) -> DataFrame:
        value = F.from_json(F.col("value").cast("string"), data.SCHEMA_DDL)
        return read(options).select(value.alias("p")).select("p.*")

    return {
        "values only, Kafka's defaults": lambda: read({}).select("value"),
        "values only, eo's defaults": lambda: read(KAFKA_READ_DEFAULTS).select("value"),
        "from_json, Kafka's defaults": lambda: parsed({}),
        "from_json, max.poll.records only": lambda: parsed(POLL),
        "from_json, max.partition.fetch.bytes only": lambda: parsed(FETCH),
        "from_json, eo's defaults": lambda: parsed(KAFKA_READ_DEFAULTS),
    }


def main(argv: list[str] | None = None) -> int:
    """Produce once, time every variant ``--repeat`` times after a warm-up, print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.kafka_read", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="measured rounds after a warm-up")
    args = parser.parse_args(argv)
    from tests.support.kafka import KafkaBroker, broker_jars_dir

    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="eo-kafka-read-")))
        broker = stack.enter_context(KafkaBroker(work / "kafka", broker_jars_dir()))
        took = kafka_input.produce_events(broker, TOPIC, args.events, args.partitions)
        print(f"produced {args.events:,} events in {took:.1f} s", file=sys.stderr)
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("eo-bench-kafka-read")
            .config("spark.jars", ",".join(str(j) for j in kafka_connector_jars()))
            .config("spark.driver.memory", "1g")
            .config("spark.ui.enabled", "false")
            .getOrCreate()
        )
        stack.callback(spark.stop)
        spark.sparkContext.setLogLevel("ERROR")

        def read(options: dict[str, str]) -> DataFrame:
            return (
                spark.read.format("kafka")
                .option("kafka.bootstrap.servers", broker.bootstrap_servers)
                .option("subscribe", TOPIC)
                .option("startingOffsets", "earliest")
                .option("endingOffsets", "latest")
                .options(**options)
                .load()
            )

        variants = _variants(read)
        seconds: dict[str, list[float]] = {name: [] for name in variants}
        for round_ in range(args.repeat + 1):
            for name, frame in variants.items():
                started = time.perf_counter()
                frame().write.format("noop").mode("overwrite").save()
                if round_ > 0:
                    seconds[name].append(time.perf_counter() - started)
    base = statistics.median(seconds["from_json, Kafka's defaults"])
    rows = []
    for name, runs in seconds.items():
        median = statistics.median(runs)
        rows.append(
            [
                name,
                f"{median:.2f}",
                f"{args.events / median:,.0f}",
                f"{base / median:.2f}" if name.startswith("from_json") else "-",
            ]
        )
    print(f"{args.events:,} events, {args.partitions} partitions, median of {args.repeat}")
    print(markdown(["variant", "seconds", "records/s", "x Kafka's defaults"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
