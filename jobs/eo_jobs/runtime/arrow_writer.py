"""Writer tasks fed by Arrow record batches (``DataFrame.mapInArrow``).

Spark ships each partition to Python as columnar Arrow batches; the task writes them in one
transaction (``task.WriterTask``) and returns one result record ``(sink, gid, count, dead)``.
This is the only writer path: Arrow keeps a timestamp an instant (a ``Row`` would hand over a naive
local wall time of the Python worker) and lets COPY be fed without a Python object per value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql import DataFrame

from eo_jobs.runtime.task import WriterTask

RESULT_FIELDS = (
    ("sink", pa.string()),
    ("gid", pa.string()),
    ("count", pa.int64()),
    ("dead", pa.int64()),
)
RESULT_DDL = "sink string, gid string, count bigint, dead bigint"


def arrow_task_writer(task: WriterTask) -> Callable[[Iterable[Any]], Iterator[Any]]:
    """The function each ``mapInArrow`` task runs: one transaction, one result record."""
    schema = pa.schema(list(RESULT_FIELDS))

    def write(batches: Iterable[Any]) -> Iterator[Any]:
        sink, gid, count, dead = task.run(batches)
        yield pa.RecordBatch.from_pydict(
            {"sink": [sink], "gid": [gid], "count": [count], "dead": [dead]}, schema=schema
        )

    return write


def write_with_arrow(frame: DataFrame, task: WriterTask) -> list[tuple[str, str, int, int]]:
    """Run ``task`` on every partition of ``frame``; ``(sink, gid, rows, dead)`` per task."""
    results = frame.mapInArrow(arrow_task_writer(task), RESULT_DDL).collect()
    return [(r[0], r[1], int(r[2]), int(r[3])) for r in results]
