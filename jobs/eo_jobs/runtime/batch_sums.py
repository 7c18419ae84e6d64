"""The sums of a sink's declared sum columns over the rows a batch writes there.

Computed in Spark from the batch's rows, independently of the writer that encodes them, and
stored with the batch's decision (``eo.decisions.sums``): the audit then checks the table
against them (``eo_jobs.audit``), so a row lost, doubled or altered after the write, or a value
a writer got wrong, shows as a difference in money rather than only in a row count.

A sum is exact: integers are summed as DECIMAL(38, 0) (Spark's bigint sum would overflow) and
decimals as themselves; a column of an inexact Spark type is refused at start-up
(``sum_column_problems``). Dead-letter rows that travel in the batch's frame are not summed.
The sum is only comparable with the table when every row summed was stored: the writer tasks'
count (rows, or keys for accumulate) must equal the frame's, or records the database refused
went to dead letters and the batch's sums for that sink are recorded as None, never as a
figure that is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from eo_jobs.sinks.postgres.arrow_copy import DL_RAW
from eo_jobs.spec.models import SinkSpec

_COUNT = "_eo_sum_count"
EXACT_SPARK_TYPES = ("tinyint", "smallint", "int", "bigint")
"""Spark's integral types (by ``simpleString``); ``decimal(p,s)`` is exact too."""


def sum_column_problems(sink: SinkSpec, schema: Sequence[tuple[str, str]]) -> list[str]:
    """Why the declared sum columns cannot be summed exactly from what this sink writes
    (``schema``: its columns' names and Spark types, as ``simpleString``)."""
    types = dict(schema)
    problems = []
    for name in sink.target.sum_columns:
        spark_type = types.get(name)
        if spark_type is None:
            problems.append(
                f"[sum-columns] sumColumns names {name}, which the sink does not write; "
                "name a column of its rows"
            )
        elif spark_type not in EXACT_SPARK_TYPES and not spark_type.startswith("decimal"):
            problems.append(
                f"[sum-columns] sumColumns {name} is of Spark type {spark_type}: its sum is "
                f"not exact; cast it in the query (CAST({name} AS DECIMAL(18, 2)), or BIGINT)"
            )
    return problems


def _summed(name: str, field: T.StructField, live: Column) -> Column:
    value = F.col(name)
    if not isinstance(field.dataType, T.DecimalType):
        value = value.cast("decimal(38,0)")
    return F.sum(F.when(live, value)).alias(name)


def batch_sums(frame: DataFrame, sink: SinkSpec) -> tuple[dict[str, str], int]:
    """(column -> exact sum as decimal text, rows or keys a complete write stores) of
    ``frame``, the rows this sink's writer tasks get; one Spark job."""
    columns = sink.target.sum_columns
    live = F.col(DL_RAW).isNull() if DL_RAW in frame.columns else F.lit(True)
    fields = {f.name: f for f in frame.schema.fields}
    if sink.target.mode == "accumulate":
        keys = [F.col(k) for k in sink.target.key_columns]
        counted = F.count_distinct(F.when(live, F.struct(*keys))).alias(_COUNT)
    else:
        counted = F.count(F.when(live, F.lit(1))).alias(_COUNT)
    row = frame.agg(*(_summed(c, fields[c], live) for c in columns), counted).collect()[0]
    sums = {c: _text(row[c]) for c in columns}
    return sums, int(row[_COUNT])


def _text(value: Decimal | None) -> str:
    """A sum as plain decimal text ("0" for no rows), never in exponent form."""
    return "0" if value is None else format(value, "f")
