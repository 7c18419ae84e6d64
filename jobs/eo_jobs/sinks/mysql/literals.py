"""Python values as MySQL literals, so that what a pipeline writes comes back equal.

The writer builds its multi-row ``INSERT`` from literals (PyMySQL's own escaping, with the
connection's charset and ``NO_BACKSLASH_ESCAPES`` state), because it must know exactly which
rows one statement holds: a statement the table refuses is written again in pieces
(``refusals``). PyMySQL's encoders are kept except where they lose information
(``tests/sinks/mysql/test_type_fidelity.py`` shows each case):

* An aware ``datetime`` (Spark ``TIMESTAMP``: an instant, UTC in Arrow) is written as its UTC
  wall time. PyMySQL drops the offset, so ``12:00+02:00`` would be stored as ``12:00``. A
  ``DATETIME(6)`` column then holds the instant in UTC, and a ``TIMESTAMP(6)`` column the
  same instant, because the writer's session ``time_zone`` is ``+00:00``. A naive
  ``datetime`` (``TIMESTAMP_NTZ``) is written as is.
* ``memoryview`` (a binary value from some Arrow paths) is written as its bytes; PyMySQL
  would write the text of ``repr(value)``.
* A list, tuple, set or dict (Spark arrays, maps, structs) is refused before any SQL
  (``UnwritableValueError``, naming the column): PyMySQL would write ``(1,2)``, which the
  server takes as a row constructor. Serialise such a column in the transform (``to_json``)
  and write it to a JSON or TEXT column.
* A NaN or infinite ``float`` or ``Decimal`` is a refused row (``UnsendableValueError``):
  MySQL's DOUBLE and DECIMAL hold neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pymysql
import pymysql.converters

CONTAINERS = (tuple, list, set, frozenset, dict)


class UnwritableValueError(TypeError):
    """A value of a type no MySQL column takes (an array, a map, a struct)."""


class UnsendableValueError(ValueError):
    """A value PyMySQL cannot write (NaN, infinity): its row is refused."""

    def __init__(self, column: str, message: str) -> None:
        super().__init__(f"column {column}: {message}")
        self.column = column
        self.message = message


def _utc_datetime(value: datetime, mapping: Any = None) -> str:
    if value.tzinfo is not None and value.utcoffset() is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return pymysql.converters.escape_datetime(value)


def _memoryview(value: memoryview, mapping: Any = None) -> str:
    return f"X'{bytes(value).hex()}'"


ENCODERS: dict[type, Any] = {
    **pymysql.converters.encoders,
    datetime: _utc_datetime,
    memoryview: _memoryview,
}
"""PyMySQL's encoders with the fixes of the module's docstring."""


def row_literal(conn: pymysql.Connection[Any], columns: Sequence[str], row: Sequence[Any]) -> str:
    """``(v1,v2,...)`` for one row of ``columns`` (see the module for what is refused)."""
    if len(row) != len(columns):
        raise ValueError(
            f"a row of {len(row)} values for the {len(columns)} columns "
            f"{', '.join(columns)}: the writer's columns must match the rows it is given"
        )
    escape = conn.escape
    parts = []
    for column, value in zip(columns, row, strict=True):
        if type(value) in CONTAINERS:
            raise UnwritableValueError(
                f"column {column}: a {type(value).__name__} value, which no MySQL column "
                "holds; serialise it in the transform (to_json) into a JSON or TEXT column"
            )
        try:
            parts.append(escape(value, ENCODERS))
        except pymysql.ProgrammingError as exc:  # nan/inf float or Decimal
            raise UnsendableValueError(column, str(exc.args[0] if exc.args else exc)) from exc
    return "(" + ",".join(parts) + ")"
