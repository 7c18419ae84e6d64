"""The whole batch as one frame: output rows and dead letters side by side, one Spark job.

Parsing, the SQL transform, the poison checks and the write happen in the writer tasks' one
pass over the batch: each output row carries two more columns, ``_eo_dl_raw`` and
``_eo_dl_reason``; a row with a reason is a dead letter (a record that did not parse, or an
output row no sink can store), written by the first sink's writer task into the dead-letter
table in the same prepared transaction, so it is exactly-once like the rest. Without a SQL
transform this is one projection of the input; with one, it is the union of the transformed
rows and the unparseable records, and the caller persists the input so the source is read once.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from eo_jobs.runtime.isolation import apply_transform
from eo_jobs.runtime.poison import unstorable_reason
from eo_jobs.runtime.source import ERROR, RAW
from eo_jobs.sinks.postgres.arrow_copy import DL_RAW, DL_REASON


def combined(staged: DataFrame, sql: str | None, key_columns: set[str]) -> DataFrame:
    """Output rows of ``staged`` (transformed) plus its unparseable records, as dead letters."""
    if sql is None:
        return _projected(staged, key_columns)
    out = apply_transform(staged.filter(F.col(ERROR).isNull()).drop(ERROR), sql)
    reason = unstorable_reason(out, key_columns)
    if reason is None:
        raw = F.lit(None).cast("string")
        reason = F.lit(None).cast("string")
    else:
        raw = F.when(reason.isNotNull(), F.to_json(F.struct(*[F.col(c) for c in out.columns])))
    good = out.select(*out.columns, raw.alias(DL_RAW), reason.alias(DL_REASON))
    bad = staged.filter(F.col(ERROR).isNotNull()).select(
        *[F.lit(None).cast(f.dataType).alias(f.name) for f in out.schema.fields],
        F.col(RAW).alias(DL_RAW),
        F.col(ERROR).alias(DL_REASON),
    )
    return good.unionByName(bad)


def _projected(staged: DataFrame, key_columns: set[str]) -> DataFrame:
    """No transform: one projection, the parse error or the unstorable reason as the reason."""
    columns = [c for c in staged.columns if c not in (RAW, ERROR)]
    out = staged.select(*columns)
    unstorable = unstorable_reason(out, key_columns)
    reason = F.col(ERROR) if unstorable is None else F.coalesce(F.col(ERROR), unstorable)
    record = F.to_json(F.struct(*[F.col(c) for c in columns]))
    raw = F.when(F.col(ERROR).isNotNull(), F.col(RAW))
    if unstorable is not None:
        raw = raw.when(unstorable.isNotNull(), record)
    return staged.select(*columns, raw.alias(DL_RAW), reason.alias(DL_REASON))
