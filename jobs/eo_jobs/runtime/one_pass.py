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

from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from eo_jobs.runtime.isolation import apply_transform
from eo_jobs.runtime.poison import unstorable_reason
from eo_jobs.runtime.source import ERROR, RAW
from eo_jobs.sinks.postgres.arrow_copy import DL_RAW, DL_REASON


@dataclass
class OnePass:
    """Builds the batch's frame; its column expressions are built once per input schema.

    Every ``F.*`` call is a round trip to the JVM: rebuilding the projection for each batch
    cost ~0.2 s of a 20,000-row batch's ~0.45 s on 2 busy cores (py-spy, bench/README.md).
    Unresolved column expressions do not belong to a DataFrame, so one set serves every batch
    of the same schema (the schema of a query's batches does not change).
    """

    sql: str | None
    key_columns: set[str]
    add_columns: frozenset[str] = frozenset()
    _projections: dict[str, list[Column]] = field(default_factory=dict)

    def frame(self, staged: DataFrame) -> DataFrame:
        """Output rows of ``staged`` (transformed) plus its unparseable records, as dead letters."""
        if self.sql is None:
            return staged.select(*self._projection(staged))
        return transformed(staged, self.sql, self.key_columns, self.add_columns)

    def _projection(self, staged: DataFrame) -> list[Column]:
        key = staged.schema.json()
        if key not in self._projections:
            self._projections[key] = projection(staged, self.key_columns, self.add_columns)
        return self._projections[key]


def transformed(
    staged: DataFrame, sql: str, key_columns: set[str], add_columns: frozenset[str] = frozenset()
) -> DataFrame:
    """The transform's output rows of ``staged`` plus its unparseable records, as dead letters."""
    out = apply_transform(staged.filter(F.col(ERROR).isNull()).drop(ERROR), sql)
    good = flagged(out, key_columns, add_columns)
    return with_letters(good, staged.filter(F.col(ERROR).isNotNull()), RAW, ERROR)


def flagged(
    out: DataFrame, key_columns: set[str], add_columns: frozenset[str] = frozenset()
) -> DataFrame:
    """``out`` with the two dead-letter columns: a row that cannot be stored carries itself as
    JSON and the reason, the others two NULLs."""
    reason = unstorable_reason(out, key_columns, add_columns)
    if reason is None:
        raw = F.lit(None).cast("string")
        reason = F.lit(None).cast("string")
    else:
        raw = F.when(reason.isNotNull(), F.to_json(F.struct(*[F.col(c) for c in out.columns])))
    return out.select(*out.columns, raw.alias(DL_RAW), reason.alias(DL_REASON))


def with_letters(good: DataFrame, letters: DataFrame, raw: str, reason: str) -> DataFrame:
    """``good`` (a flagged frame) plus each row of ``letters`` as a dead letter: its ``raw`` and
    ``reason`` columns, every data column NULL."""
    data = [f for f in good.schema.fields if f.name not in (DL_RAW, DL_REASON)]
    bad = letters.select(
        *[F.lit(None).cast(f.dataType).alias(f.name) for f in data],
        F.col(raw).alias(DL_RAW),
        F.col(reason).alias(DL_REASON),
    )
    return good.unionByName(bad)


def projection(
    staged: DataFrame, key_columns: set[str], add_columns: frozenset[str] = frozenset()
) -> list[Column]:
    """No transform: one projection, the parse error or the unstorable reason as the reason."""
    columns = [c for c in staged.columns if c not in (RAW, ERROR)]
    unstorable = unstorable_reason(staged.select(*columns), key_columns, add_columns)
    reason = F.col(ERROR) if unstorable is None else F.coalesce(F.col(ERROR), unstorable)
    record = F.to_json(F.struct(*[F.col(c) for c in columns]))
    raw = F.when(F.col(ERROR).isNotNull(), F.col(RAW))
    if unstorable is not None:
        raw = raw.when(unstorable.isNotNull(), record)
    return [*[F.col(c) for c in columns], raw.alias(DL_RAW), reason.alias(DL_REASON)]
