"""Writer tasks fed by Arrow record batches (``DataFrame.mapInArrow``) instead of pickled rows.

The contract is the row writer's in ``batch``: each task writes its partition in one
transaction (prepared under its gid in exactly-once mode, else committed) and reports
``(sink, gid, count)``. Only the way rows reach Python differs: Spark ships columnar Arrow
batches, turned into row tuples one column at a time (``to_pylist``), instead of unpickling a
``Row`` object per record. ``EO_WRITER=arrow`` selects it, so that both paths run on the same
build and can be measured against each other (``bench/compare.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql import DataFrame

from eo_jobs.runtime.task import WriterTask

WRITER_ENV = "EO_WRITER"
"""Set to ``arrow`` to feed writer tasks with ``mapInArrow``; anything else keeps the row path."""
ARROW = "arrow"
RESULT_FIELDS = (("sink", pa.string()), ("gid", pa.string()), ("count", pa.int64()))
RESULT_DDL = "sink string, gid string, count bigint"


def _python_values(column: Any) -> list[Any]:
    """One column as Python values; timestamps as ISO text.

    COPY sends every value as text, so a ``datetime`` would only be built to be formatted
    again, and building tz-aware ones is Arrow's slowest conversion (~5x the cast). Arrow
    formats them in C++ with their offset ("2026-01-01 00:00:00.000000Z" in a UTC session),
    which PostgreSQL parses to the same instant whatever its own ``TimeZone``; a
    ``TIMESTAMP_NTZ`` value keeps its wall time, as it should.
    """
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.string())
    return list(column.to_pylist())


def _rows(batches: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """Row tuples of every record batch, converted column by column."""
    for batch in batches:
        yield from zip(*(_python_values(column) for column in batch.columns), strict=True)


def arrow_task_writer(task: WriterTask) -> Callable[[Iterable[Any]], Iterator[Any]]:
    """The function each ``mapInArrow`` task runs: one transaction, one result record."""
    schema = pa.schema(list(RESULT_FIELDS))

    def write(batches: Iterable[Any]) -> Iterator[Any]:
        sink, gid, count = task.run(_rows(batches))
        yield pa.RecordBatch.from_pydict(
            {"sink": [sink], "gid": [gid], "count": [count]}, schema=schema
        )

    return write


def write_with_arrow(
    frame: DataFrame, task: Callable[[Iterable[Any]], Iterator[Any]]
) -> list[tuple[str, str, int]]:
    """Run ``task`` on every partition of ``frame``; ``(sink, gid, count)`` per task."""
    return [(r[0], r[1], int(r[2])) for r in frame.mapInArrow(task, RESULT_DDL).collect()]
