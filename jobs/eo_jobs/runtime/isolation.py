"""The slow path of a batch whose SQL transform failed: find the rows that break it.

Spark reports a data error (a bad cast, an overflow, ...) for a whole job, not for a row. When
a batch fails that way, the transform is applied again to halves of the batch (bisection over a
row id) until the failing rows are found; they become dead letters and the rest of the batch is
written. It costs several Spark jobs, so it only runs for a batch that actually failed.
"""

from __future__ import annotations

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from eo_jobs.runtime.source import RAW

ROW_ID = "_eo_row"
DATA_ERRORS = (
    "CAST_",
    "ARITHMETIC_OVERFLOW",
    "DIVIDE_BY_ZERO",
    "NUMERIC_",
    "INVALID_ARRAY_INDEX",
    "DATETIME_",
    "CANNOT_PARSE",
    "INVALID_FRACTION",
    "INVALID_INDEX",
    "BINARY_ARITHMETIC",
)


def record_text(df: DataFrame) -> Column:
    """A record as text for a dead letter: its raw text, or the parsed record as JSON.

    Spark's file readers keep the raw text only of records that do not parse; a record that
    parsed and then broke the transform is kept as JSON of its declared columns.
    """
    columns = [F.col(c) for c in df.columns if c not in (ROW_ID, RAW)]
    return F.coalesce(F.col(RAW), F.to_json(F.struct(*columns)))


def apply_transform(df: DataFrame, sql: str | None) -> DataFrame:
    """The user's SQL over the view ``source`` (``df`` without eo's own columns)."""
    plain = df.drop(ROW_ID, RAW)
    if sql is None:
        return plain
    plain.createOrReplaceTempView("source")
    return df.sparkSession.sql(sql)


def is_data_error(exc: BaseException) -> bool:
    """Whether Spark failed on a value (a row the transform cannot process), not on the job."""
    getter = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    condition = str(getter() or "") if callable(getter) else ""
    return any(condition.startswith(prefix) for prefix in DATA_ERRORS)


def _materialize(df: DataFrame) -> DataFrame:
    """Cache and compute every column (a bare count() would prune the failing expressions)."""
    cached = df.persist()
    try:
        cached.count()
    except BaseException:
        cached.unpersist()
        raise
    return cached


class TransformIsolation:
    """Apply the SQL transform; isolate rows that make it fail (by bisection) as dead letters."""

    def __init__(self, sql: str | None) -> None:
        self.sql = sql

    def _apply(self, df: DataFrame) -> DataFrame:
        return apply_transform(df, self.sql)

    def run(self, valid: DataFrame) -> tuple[DataFrame, list[tuple[str, str]]]:
        """(transformed rows, [(raw, reason)] of rows the transform could not process)."""
        try:
            return _materialize(self._apply(valid)), []
        except PySparkException as exc:
            if not is_data_error(exc):
                raise
            first_error = exc
        ids = sorted(r[0] for r in valid.select(ROW_ID).collect())
        bad: list[tuple[int, str]] = []
        self._bisect(valid, ids, bad)
        if not bad:
            raise first_error
        kept = valid.filter(~F.col(ROW_ID).isin([i for i, _ in bad]))
        out = _materialize(self._apply(kept))
        rows = {
            r[0]: r[1]
            for r in valid.filter(F.col(ROW_ID).isin([i for i, _ in bad]))
            .select(ROW_ID, record_text(valid))
            .collect()
        }
        return out, [(rows.get(i) or "", reason) for i, reason in bad]

    def _bisect(self, df: DataFrame, ids: list[int], bad: list[tuple[int, str]]) -> None:
        if not ids:
            return
        part = df.filter(F.col(ROW_ID).between(ids[0], ids[-1]))
        try:
            _materialize(self._apply(part))
            return
        except PySparkException as exc:
            if not is_data_error(exc):
                raise
            if len(ids) == 1:
                bad.append((ids[0], f"transform failed: {str(exc).splitlines()[0][:500]}"))
                return
        middle = len(ids) // 2
        self._bisect(df, ids[:middle], bad)
        self._bisect(df, ids[middle:], bad)
