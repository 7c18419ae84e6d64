"""Rows no sink can store, found before they fail a whole batch.

PostgreSQL text cannot hold U+0000 (COPY fails, and the batch with it, on every replay), and a
NULL upsert key never matches a unique index (the row would be inserted again by every batch), and
a NULL addend of an accumulate sink would add nothing to a running total, unseen.
Such rows go to the dead-letter table with the reason, like records that do not parse.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, MapType, StringType, StructType

UNSTORABLE = "_eo_unstorable"
NUL = "\u0000"
NUL_ESCAPE_IN_JSON = r"(^|[^\\])(\\\\)*\\u0000"
"""``to_json`` writes U+0000 as the escape ``\\u0000`` and a backslash as ``\\\\``: the escape is
the character only after an even run of backslashes (``"\\\\u0000"`` is the text ``\\u0000``)."""


def unstorable_reason(
    df: DataFrame, key_columns: set[str], add_columns: frozenset[str] = frozenset()
) -> Column | None:
    """Why a row cannot be stored by any sink, or NULL; None when no column can be a problem.

    PostgreSQL text cannot hold U+0000 (COPY fails, the whole batch with it, forever), a
    NULL upsert key never matches a unique index, so it would be inserted again by every batch,
    and a NULL addend (``add_columns``) would leave a running total short with no trace.
    """
    reasons: list[Column] = []
    for column in df.schema.fields:
        name, kind = column.name, column.dataType
        if isinstance(kind, StringType):
            # contains: a byte search; instr's character scan cost 4-7 % of a 200,000-row cycle.
            has_nul = F.col(name).contains(NUL)
        elif isinstance(kind, (ArrayType, MapType, StructType)):
            has_nul = F.to_json(F.col(name)).rlike(NUL_ESCAPE_IN_JSON)
        else:
            has_nul = None
        if has_nul is not None:
            reasons.append(
                F.when(
                    has_nul,
                    F.lit(
                        f"column {name} contains a NUL character (U+0000), which PostgreSQL "
                        "text cannot store; clean it in spec.transform.sql, e.g. "
                        f"replace({name}, char(0), '')"
                    ),
                )
            )
        if name in key_columns:
            reasons.append(
                _when_null(
                    name,
                    f"upsert key column {name} is NULL: a unique index never matches NULL, "
                    "so the row would be inserted again by every batch",
                )
            )
        if name in add_columns:
            reasons.append(
                _when_null(
                    name,
                    f"accumulate column {name} is NULL: it would add nothing to the running "
                    "total; give it a value in the query (e.g. coalesce) or filter the row",
                )
            )
    return F.coalesce(*reasons) if reasons else None


def _when_null(name: str, reason: str) -> Column:
    """``reason`` where column ``name`` is NULL, else NULL."""
    return F.when(F.col(name).isNull(), F.lit(reason))


def split_unstorable(
    df: DataFrame, key_columns: set[str], add_columns: frozenset[str] = frozenset()
) -> tuple[DataFrame, list[tuple[str, str]]]:
    """(rows every sink can store, [(row as JSON, reason)] of the others)."""
    reason = unstorable_reason(df, key_columns, add_columns)
    if reason is None:
        return df, []
    flagged = df.withColumn(UNSTORABLE, reason)
    columns = [F.col(c) for c in df.columns]
    bad = [
        (str(r[0]), str(r[1]))
        for r in flagged.filter(F.col(UNSTORABLE).isNotNull())
        .select(F.to_json(F.struct(*columns)), F.col(UNSTORABLE))
        .collect()
    ]
    if not bad:
        return df, []
    return flagged.filter(F.col(UNSTORABLE).isNull()).drop(UNSTORABLE), bad
