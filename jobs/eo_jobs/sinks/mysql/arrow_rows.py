"""Arrow record batches as row tuples PyMySQL sends as MySQL literals.

A Spark ``TIMESTAMP`` reaches the task as an Arrow instant (UTC); MySQL's ``DATETIME`` has no
zone, so the instant is written as its UTC wall time (the writer's session also sets
``time_zone = '+00:00'``, so a ``TIMESTAMP`` column stores the same instant). A
``TIMESTAMP_NTZ`` (zone-less) keeps its wall time. Every other type converts as
``to_pylist`` gives it (``Decimal`` for decimals, ``date``, ``bytes``, ``bool``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]


def _values(column: Any) -> list[Any]:
    """One column's values; an instant as its naive UTC wall time."""
    kind = column.type
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        column = column.cast(pa.timestamp(kind.unit))
    return list(column.to_pylist())


def python_rows(batches: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """Row tuples of every record batch, converted column by column."""
    for batch in batches:
        if batch.num_rows:
            yield from zip(*(_values(column) for column in batch.columns), strict=True)
