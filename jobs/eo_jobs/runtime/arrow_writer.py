"""Writer tasks fed by Arrow record batches (Spark's ``mapInArrow``), the UDF built once per sink.

Spark ships each partition to Python as columnar Arrow batches; the task writes them in one
transaction (``task.WriterTask``) and returns one result record ``(sink, gid, count, dead)``.
This is the only writer path: Arrow keeps a timestamp an instant (a ``Row`` would hand over a naive
local wall time of the Python worker) and lets COPY be fed without a Python object per value.

``DataFrame.mapInArrow`` builds a new UDF on every call: a new pandas UDF, its function pickled
and a JVM UDF made from it, one Py4J call per column. That was ~26 ms of every micro-batch on
the driver's critical path (py-spy, 200,000-row batches of ~0.55 s). ``ArrowWriteJob`` builds
the UDF once and binds it to each batch's frame; the one thing that changes between batches,
the batch id, reaches the tasks as a Spark local property of the job (set by the thread that
runs it, like Spark's own job tags), not inside the pickled function.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark import TaskContext
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.functions import pandas_udf
from pyspark.sql.udf import UserDefinedFunction
from pyspark.util import PythonEvalType

from eo_jobs.runtime.task import WriterTask

RESULT_FIELDS = (
    ("sink", pa.string()),
    ("gid", pa.string()),
    ("count", pa.int64()),
    ("dead", pa.int64()),
)
RESULT_DDL = "sink string, gid string, count bigint, dead bigint"
BATCH_PROPERTY = "eo.batch"
"""The Spark local property carrying the micro-batch id to the writer tasks of its job."""

ArrowMap = Callable[[Iterable[Any]], Iterator[Any]]


def current_batch() -> int:
    """The batch id of the job this task belongs to; a task without one refuses to write."""
    context = TaskContext.get()
    value = None if context is None else context.getLocalProperty(BATCH_PROPERTY)
    if value is None or not value.isdigit():
        raise RuntimeError(
            f"writer task without a batch id (Spark local property {BATCH_PROPERTY}={value!r}): "
            "eo's writer jobs are started by ArrowWriteJob.run"
        )
    return int(value)


def arrow_task_writer(task: WriterTask) -> ArrowMap:
    """The function each ``mapInArrow`` task runs: one transaction, one result record.

    ``task`` describes the sink; the batch id comes from the job (``current_batch``).
    """
    schema = pa.schema(list(RESULT_FIELDS))

    def write(batches: Iterable[Any]) -> Iterator[Any]:
        sink, gid, count, dead = replace(task, batch_id=current_batch()).run(batches)
        yield pa.RecordBatch.from_pydict(
            {"sink": [sink], "gid": [gid], "count": [count], "dead": [dead]}, schema=schema
        )

    return write


@dataclass
class ArrowWriteJob:
    """``mapInArrow(function)`` with the UDF made once, run for one batch at a time.

    The UDF's call on a set of column names is made once too; binding it to a batch's frame is
    one Py4J call for the plan (``DataFrame.mapInArrow`` does the same through private members
    of the DataFrame; the tests run it on the installed PySpark).
    """

    function: ArrowMap
    udf: UserDefinedFunction = field(init=False)
    _calls: dict[tuple[str, ...], Column] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.udf = pandas_udf(  # type: ignore[call-overload]
            self.function,
            returnType=RESULT_DDL,
            functionType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF,
        )

    def run(
        self, frame: DataFrame, columns: Sequence[str], batch_id: int
    ) -> list[tuple[str, str, int, int]]:
        """Run the function on every partition of ``frame`` (whose columns are ``columns``: a
        frame looks its own up in the JVM); ``(sink, gid, rows, dead)`` per task."""
        names = tuple(columns)
        if names not in self._calls:
            # Unresolved column references: the call resolves against each batch's frame.
            self._calls[names] = self.udf(*[F.col(f"`{n.replace('`', '``')}`") for n in names])
        column = self._calls[names]
        session = frame.sparkSession
        mapped = DataFrame(frame._jdf.mapInArrow(column._jc, False, None), session)
        context = session.sparkContext
        context.setLocalProperty(BATCH_PROPERTY, str(batch_id))
        try:
            results = mapped.collect()
        finally:
            context.setLocalProperty(BATCH_PROPERTY, None)  # type: ignore[arg-type]
        return [(r[0], r[1], int(r[2]), int(r[3])) for r in results]
