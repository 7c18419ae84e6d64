"""The engine's ceiling: the same streaming read and parse, into Spark's ``noop`` sink.

``foreachBatch(lambda df, id: df.write.format("noop").mode("append").save())``: Spark reads
the batch's files and parses every record against the declared schema (``noop`` consumes every
row, so nothing is pruned away), and writes nothing. No writer can make a batch faster than
this on the same Spark; eo's rows/s over this job's says how much of the engine's speed the
write path keeps.

Run as ``python -m bench.spark_noop_job PIPELINE.yaml``; prints one JSON line per batch,
``{"event": "batch", "batch": N, "seconds": S}``, like the other variants.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pyspark.sql import DataFrame

from bench.spark_jdbc_job import stream
from eo_jobs.spec.models import PipelineSpec


def _write(_spec: PipelineSpec, df: DataFrame) -> None:
    df.write.format("noop").mode("append").save()


def main(argv: list[str] | None = None) -> int:
    """Run the query to the end of the available files (``availableNow``)."""
    parser = argparse.ArgumentParser(prog="bench.spark_noop_job", description=__doc__)
    parser.add_argument("pipeline", type=Path, help="pipeline file: source and Spark settings")
    args = parser.parse_args(argv)
    return stream(args.pipeline, "bench-spark-noop", _write)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
