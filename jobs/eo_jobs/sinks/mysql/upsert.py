"""Upsert into MySQL/MariaDB: one ordering rule, in Python and in ``ON DUPLICATE KEY UPDATE``.

The rule is the PostgreSQL writer's (``sinks.postgres.writer``): the row with the highest
version wins; a NULL version is older than any value (a stored NULL is replaced by any
incoming row, an incoming NULL never replaces a stored non-NULL); among equal versions the
later row wins; without a version column the later row wins.

``winners`` applies it to one task's rows first, so one statement never holds two rows of a
key: the refusal of one row then never takes another row of its key with it, and the count is
of distinct keys. ``on_duplicate_key`` applies it against the stored row. Every non-key
column is assigned ``IF(<incoming wins>, VALUES(c), c)``, and the version column last:
MySQL runs the assignments left to right and later ones see the earlier results. This guard
would survive either order (once the incoming version is assigned, the guard still says the
incoming row wins, and a losing row assigns nothing), which the tests confirm; the version
goes last anyway so that a guard which is not stable that way stays correct.

``VALUES(c)`` is used rather than MySQL 8.0.20's row alias (``INSERT ... AS new ... UPDATE
c = new.c``): MariaDB 10.11 has no row alias, and MySQL 8 still accepts ``VALUES()``, with a
deprecation warning.

Differences from PostgreSQL's ``ON CONFLICT (keys)``, which the sink contract check covers:

* ``ON DUPLICATE KEY`` fires on *any* unique index of the table, not only the one on the
  key columns. A table whose key columns are not its only unique key updates the row another
  index found; the contract asks for a primary or unique key on exactly the key columns.
* Keys are compared by the column's collation in the table (``'a'`` equals ``'A'`` and
  ``'a '`` under the default ``utf8mb4_general_ci``/``PAD SPACE``) but exactly in Python. Two
  rows Python keeps apart then meet in one statement, whose rows the server applies in
  order, through the same guard: the rule still holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from eo_jobs.sinks.mysql.identifiers import quote_identifier


def incoming_wins(version: str) -> str:
    """The guard: the stored version is NULL, or the incoming one is not NULL and not lower."""
    v = quote_identifier(version)
    return f"({v} IS NULL OR (VALUES({v}) IS NOT NULL AND {v} <= VALUES({v})))"


def on_duplicate_key(columns: Sequence[str], keys: Sequence[str], version: str | None) -> str:
    """The ``ON DUPLICATE KEY UPDATE`` clause of an upsert (see the module)."""
    updates = [c for c in columns if c not in keys]
    if not updates:  # keys only: a stored row stays as it is
        key = quote_identifier(keys[0])
        return f" ON DUPLICATE KEY UPDATE {key} = {key}"
    if version is None:
        assigned = (f"{quote_identifier(c)} = VALUES({quote_identifier(c)})" for c in updates)
        return " ON DUPLICATE KEY UPDATE " + ", ".join(assigned)
    wins = incoming_wins(version)
    ordered = [c for c in updates if c != version] + [version]  # the version column last
    assigned = (
        f"{q} = IF({wins}, VALUES({q}), {q})" for q in (quote_identifier(c) for c in ordered)
    )
    return " ON DUPLICATE KEY UPDATE " + ", ".join(assigned)


def winners(
    rows: Iterable[Sequence[Any]], key_index: Sequence[int], version_index: int | None
) -> list[Sequence[Any]]:
    """One row per key, the winner by the rule, in the order keys first appear."""
    kept: dict[tuple[Any, ...], Sequence[Any]] = {}
    for row in rows:
        key = tuple(row[i] for i in key_index)
        held = kept.get(key)
        if held is None or version_index is None:
            kept[key] = row
            continue
        stored, incoming = held[version_index], row[version_index]
        if stored is None or (incoming is not None and stored <= incoming):
            kept[key] = row
    return list(kept.values())
