"""Arrow record batches as MySQL row literals, built by Arrow's compute kernels (C++).

The writer's Python path (``literals.row_literal``) turns every value into a Python object and
escapes it with PyMySQL, one call per value; at 200,000 rows a batch that is most of a writer
task's time. This module builds the same ``(v1,v2,...)`` text a column at a time with
``pyarrow.compute``, so that the writer (``MySqlWriter.write_arrow_on``) only joins strings.

Each literal means what the Python path's means (``tests/sinks/mysql/test_arrow_literals.py``
writes both into MariaDB and compares the rows):

* integers as their decimal text; booleans as ``1``/``0``;
* decimals as plain text (Arrow writes ``1.00E-7`` or ``0E-9`` for a small value of a scale
  above 6, and ``1.2E+4`` for a negative scale, which MySQL would read as a DOUBLE: those
  values are taken from PyMySQL's ``format(value, "f")``);
* floats as the shortest round-trip text of the double (a ``FLOAT`` widened first, as
  ``to_pylist`` does) with an ``e`` exponent, so the server reads a DOUBLE literal and not a
  DECIMAL one; a NaN or infinite value marks its row ``unsendable``: the writer sends it
  through the Python path, which refuses it as before;
* strings quoted and escaped as PyMySQL's ``escape_string`` does (backslash, NUL, ``\\n``,
  ``\\r``, ctrl-Z, both quotes), or with quotes doubled only when the session has
  ``NO_BACKSLASH_ESCAPES`` (the writer's session does not, but the choice follows the
  connection as PyMySQL's does);
* dates ``'YYYY-MM-DD'``; timestamps ``'YYYY-MM-DD HH:MM:SS.ffffff'``, an instant as its UTC
  wall time and a zone-less one as is (``literals``);
* NULL as ``NULL``.

Any other type (binary, time, nested, nanosecond timestamps) returns None: the writer sends
that batch through the Python path, which writes or refuses it exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
from pymysql.constants import SERVER_STATUS

TEXT = pa.large_string()
"""Every piece is large_string: ``binary_join_element_wise`` wants one type, and a batch's
literals may pass 2 GiB where one column's text would not."""

BACKSLASH_ESCAPES = (
    ("\\", "\\\\"),  # first: the later replacements add backslashes
    ("\x00", "\\0"),
    ("\n", "\\n"),
    ("\r", "\\r"),
    ("\x1a", "\\Z"),
    ('"', '\\"'),
    ("'", "\\'"),
)
"""PyMySQL's ``converters._escape_table``, as substring replacements."""
QUOTE_ONLY = (("'", "''"),)
"""What PyMySQL escapes when the session has ``NO_BACKSLASH_ESCAPES``."""
PLAIN_DECIMAL_SCALE = 6
"""Arrow writes a decimal in plain notation when its scale is not negative and its exponent
is at least -6, so always from scale 0 to this one; otherwise values are checked for an
``E``."""


@dataclass(frozen=True)
class BatchLiterals:
    """One record batch's row literals, and which rows the Python path must take instead."""

    rows: Any
    """A large_string array: ``(v1,v2,...)`` per row (an unsendable row's text is unused)."""
    unsendable: Any
    """A boolean array or None: rows holding a NaN or infinite float."""


def _concat(*parts: Any) -> Any:
    """Element-wise concatenation of arrays and ``str`` constants (as large_string)."""
    pieces = [pa.scalar(p, TEXT) if isinstance(p, str) else p for p in parts]
    return pc.binary_join_element_wise(*pieces, pa.scalar("", TEXT))


def _escaped(column: Any, no_backslash_escapes: bool) -> Any:
    text = column.cast(TEXT)
    for old, new in QUOTE_ONLY if no_backslash_escapes else BACKSLASH_ESCAPES:
        text = pc.replace_substring(text, old, new)
    return _concat("'", text, "'")


def _decimal(column: Any) -> Any:
    text = column.cast(TEXT)
    if 0 <= column.type.scale <= PLAIN_DECIMAL_SCALE:
        return text
    exponent = pc.fill_null(pc.match_substring(text, "E"), False)
    if not pc.any(exponent).as_py():
        return text
    odd = column.filter(exponent).to_pylist()
    plain = pa.array([format(Decimal(v), "f") for v in odd], TEXT)
    return pc.replace_with_mask(text, exponent, plain)


def _float(column: Any) -> tuple[Any, Any]:
    wide = column.cast(pa.float64())
    text = wide.cast(TEXT)
    has_exponent = pc.match_substring(text, "e")
    text = pc.if_else(has_exponent, text, _concat(text, "e0"))
    unsendable = pc.fill_null(pc.invert(pc.is_finite(wide)), False)
    return text, unsendable


def _timestamp(column: Any) -> Any | None:
    kind = column.type
    if kind.unit == "ns":
        return None  # to_pylist's nanoseconds are not a datetime: the Python path decides
    wall = column.cast(pa.timestamp("us"))  # an instant: its UTC wall time (literals)
    return _concat("'", wall.cast(TEXT), "'")


def column_literals(column: Any, no_backslash_escapes: bool) -> tuple[Any, Any] | None:
    """One column's literals without NULLs filled, and its unsendable rows (or None); None
    for a type this module does not write."""
    kind = column.type
    t = pa.types
    unsendable = None
    if t.is_integer(kind):
        text = column.cast(TEXT)
    elif t.is_boolean(kind):
        text = pc.if_else(column, pa.scalar("1", TEXT), pa.scalar("0", TEXT))
    elif t.is_decimal(kind):
        text = _decimal(column)
    elif t.is_floating(kind) and not t.is_float16(kind):
        text, unsendable = _float(column)
    elif t.is_string(kind) or t.is_large_string(kind):
        text = _escaped(column, no_backslash_escapes)
    elif t.is_date32(kind) or t.is_date64(kind):
        text = _concat("'", column.cast(pa.date32()).cast(TEXT), "'")
    elif t.is_timestamp(kind):
        text = _timestamp(column)
        if text is None:
            return None
    elif t.is_null(kind):
        text = pa.nulls(len(column), TEXT)
    else:
        return None
    return text, unsendable


def batch_literals(batch: Any, no_backslash_escapes: bool) -> BatchLiterals | None:
    """Every row of ``batch`` as ``(v1,v2,...)``; None when a column has a type the Python
    path must write (see the module)."""
    pieces = []
    unsendable = None
    for column in batch.columns:
        found = column_literals(column, no_backslash_escapes)
        if found is None:
            return None
        text, bad = found
        pieces.append(pc.fill_null(text, pa.scalar("NULL", TEXT)))
        if bad is not None:
            unsendable = bad if unsendable is None else pc.or_(unsendable, bad)
    rows = _concat("(", pc.binary_join_element_wise(*pieces, pa.scalar(",", TEXT)), ")")
    if unsendable is not None and not pc.any(unsendable).as_py():
        unsendable = None
    return BatchLiterals(rows, unsendable)


def no_backslash_escapes(conn: Any) -> bool:
    """Whether ``conn``'s session has ``NO_BACKSLASH_ESCAPES`` (PyMySQL's own test)."""
    return bool(conn.server_status & SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES)
