"""MySQL identifiers, backtick-quoted: never spliced raw into a statement."""

from __future__ import annotations

MAX_IDENTIFIER = 64


def quote_identifier(name: str) -> str:
    """``name`` as one backtick-quoted MySQL identifier; refuses what MySQL would not take."""
    if not name or len(name) > MAX_IDENTIFIER or "\x00" in name or name != name.rstrip(" "):
        raise ValueError(f"not a MySQL identifier: {name!r}")
    return "`" + name.replace("`", "``") + "`"


def table_identifier(table: str) -> str:
    """``table`` or ``database.table``, quoted part by part."""
    return ".".join(quote_identifier(part) for part in table.split(".", 1))
