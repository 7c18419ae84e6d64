"""Does this PostgreSQL sink honour the exactly-once contract? Say why not, precisely.

What silently breaks two-phase commit in PostgreSQL: ``max_prepared_transactions = 0`` (PREPARE
fails), an UNLOGGED table (its contents vanish after a crash, prepared or not), missing
privileges (found only mid-batch), a missing table or columns, for upserts and accumulate no
unique index on the key columns (ON CONFLICT needs one), and for accumulate an add column whose
type cannot hold an exact sum (a float rounds money). A driver checks all of this before its
first batch and refuses to start in exactly-once mode, with every problem listed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg


@dataclass(frozen=True)
class ContractProblem:
    """One reason the sink cannot honour the contract."""

    code: str
    message: str

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


def check_contract(
    conn: psycopg.Connection[Any],
    table: str,
    *,
    columns: Sequence[str] = (),
    mode: str = "append",
    key_columns: Sequence[str] = (),
    two_phase: bool = True,
    add_columns: Sequence[str] = (),
    sum_columns: Sequence[str] = (),
    audit_column: str | None = None,
) -> list[ContractProblem]:
    """Every contract problem of ``table`` for this writer; empty when all is well."""
    problems: list[ContractProblem] = []
    schema, _, name = table.partition(".")
    if two_phase:
        limit = conn.execute("SELECT current_setting('max_prepared_transactions')::int").fetchone()
        if limit is not None and int(limit[0]) == 0:
            problems.append(
                ContractProblem(
                    "max_prepared_transactions",
                    "max_prepared_transactions is 0 on this server, so PREPARE TRANSACTION "
                    "fails; set it (postgresql.conf) to at least writerPartitions x sinks x 2 "
                    "and restart PostgreSQL",
                )
            )
    row = conn.execute(
        """SELECT c.oid, c.relpersistence, c.relkind FROM pg_class c
           JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = %s AND c.relname = %s""",
        (schema, name),
    ).fetchone()
    if row is None:
        problems.append(
            ContractProblem(
                "missing-table",
                f"table {table} does not exist in database {conn.info.dbname}; create it "
                "before starting the pipeline (eo never creates data tables)",
            )
        )
        return problems
    oid, persistence, kind = row
    if persistence == "u":
        problems.append(
            ContractProblem(
                "unlogged-table",
                f"table {table} is UNLOGGED: PostgreSQL truncates it after a crash, losing "
                f"committed batches; run ALTER TABLE {table} SET LOGGED",
            )
        )
    if persistence == "t" or kind not in ("r", "p"):
        problems.append(
            ContractProblem("not-a-table", f"{table} is not an ordinary (logged) table")
        )
    needed = ["INSERT"] + (["UPDATE"] if mode != "append" else [])
    for privilege in needed:
        ok = conn.execute("SELECT has_table_privilege(%s, %s)", (oid, privilege)).fetchone()
        if ok is not None and not ok[0]:
            problems.append(
                ContractProblem(
                    "privilege",
                    f"user {conn.info.user} lacks {privilege} on {table}; "
                    f"GRANT {privilege} ON {table} TO {conn.info.user}",
                )
            )
    problems.extend(_control_privileges(conn))
    existing: dict[str, str] = {
        r[0]: r[1]
        for r in conn.execute(
            "SELECT attname, format_type(atttypid, NULL) FROM pg_attribute "
            "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped",
            (oid,),
        ).fetchall()
    }
    missing = [c for c in columns if c not in existing and c != audit_column]
    if missing:
        problems.append(
            ContractProblem(
                "missing-columns",
                f"table {table} has no column(s) {', '.join(missing)} that the pipeline writes; "
                "add them or change the transform",
            )
        )
    if mode != "append" and key_columns and not _has_unique_index(conn, oid, key_columns):
        keys = ", ".join(key_columns)
        problems.append(
            ContractProblem(
                "no-unique-key",
                f"{mode} needs a unique index on exactly ({keys}) of {table}; "
                f"CREATE UNIQUE INDEX ON {table} ({keys})",
            )
        )
    problems.extend(_inexact_sums(table, add_columns, existing))
    problems.extend(_inexact_sums(table, sum_columns, existing, what="sumColumns sums"))
    problems.extend(_audit_column(table, audit_column, existing))
    return problems


AUDIT_COLUMN_TYPES = ("bigint", "numeric")
"""Types that hold every batch id and compare with one as a number (the audit counts the rows
above its position): a narrower integer would refuse batch 32,768 or 2^31, text would compare
as text."""


def _audit_column(table: str, column: str | None, types: dict[str, str]) -> list[ContractProblem]:
    """The ``auditColumn`` eo fills with batch ids: present, and of a type that holds them."""
    if column is None:
        return []
    if column not in types:
        fix = f"ALTER TABLE {table} ADD COLUMN {column} bigint"
        return [
            ContractProblem(
                "audit-column",
                f"table {table} has no column {column} for auditColumn (eo fills it with each "
                f"row's batch id); run {fix}",
            )
        ]
    if types[column] in AUDIT_COLUMN_TYPES:
        return []
    fix = f"ALTER TABLE {table} ALTER COLUMN {column} TYPE bigint"
    return [
        ContractProblem(
            "audit-column",
            f"auditColumn {table}.{column} is of type {types[column]}, which cannot hold every "
            f"batch id as a number; run {fix}",
        )
    ]


EXACT_SUM_TYPES = ("smallint", "integer", "bigint", "numeric")
"""Column types an accumulate sink may add to: a sum in them is exact (a float's is not)."""


def _inexact_sums(
    table: str, columns: Sequence[str], types: dict[str, str], what: str = "accumulate adds to"
) -> list[ContractProblem]:
    """Add (or sum) columns whose type (``types``: the table's, by column) cannot hold an exact
    running total (mode accumulate) or sum (sumColumns); a missing one is reported as a
    missing column."""
    return [
        ContractProblem(
            "inexact-sum",
            f"{what} {table}.{name}, of type {types[name]}: sums in it are not "
            f"exact; make it one of {', '.join(EXACT_SUM_TYPES)} (ALTER TABLE {table} ALTER "
            f"COLUMN {name} TYPE numeric)",
        )
        for name in columns
        if name in types and types[name] not in EXACT_SUM_TYPES
    ]


def _control_privileges(conn: psycopg.Connection[Any]) -> list[ContractProblem]:
    exists = conn.execute("SELECT to_regclass('eo.markers') IS NOT NULL").fetchone()
    if exists is not None and exists[0]:
        ok = conn.execute("SELECT has_table_privilege('eo.markers', 'INSERT')").fetchone()
        if ok is not None and not ok[0]:
            return [
                ContractProblem(
                    "privilege",
                    f"user {conn.info.user} cannot INSERT into eo.markers; grant it "
                    "INSERT, SELECT, DELETE on eo.markers",
                )
            ]
        return []
    can_create = conn.execute(
        "SELECT has_database_privilege(current_database(), 'CREATE')"
    ).fetchone()
    if can_create is not None and not can_create[0]:
        return [
            ContractProblem(
                "privilege",
                f"schema eo is missing and user {conn.info.user} cannot create it; have an "
                "administrator run `eo recover` once, or GRANT CREATE ON DATABASE",
            )
        ]
    return []


def _has_unique_index(conn: psycopg.Connection[Any], oid: int, keys: Sequence[str]) -> bool:
    rows = conn.execute(
        """SELECT array_agg(a.attname::text ORDER BY a.attname)
           FROM pg_index i
           JOIN LATERAL unnest(i.indkey) AS k(attnum) ON true
           JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
           WHERE i.indrelid = %s AND i.indisunique AND i.indpred IS NULL
           GROUP BY i.indexrelid""",
        (oid,),
    ).fetchall()
    wanted = sorted(keys)
    return any(sorted(r[0]) == wanted for r in rows)
