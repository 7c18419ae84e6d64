"""The PostgreSQL sink kind (``sinks.kinds.SinkKind``): COPY writers, its contract, dead letters.

eo owns the dead-letter table and creates it on first use (data tables are the user's): a role
needs INSERT on it when it exists, and CREATE on its schema only when it does not.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from eo_jobs.sinks.postgres.arrow_copy import DeadLetters, Refused, arrow_body
from eo_jobs.sinks.postgres.column_types import column_type_problems
from eo_jobs.sinks.postgres.contract import check_contract
from eo_jobs.sinks.postgres.jvm import postgres_jvm_sink
from eo_jobs.sinks.postgres.refusals import DEAD_LETTER_COLUMNS, DEAD_LETTER_DDL
from eo_jobs.sinks.postgres.writer import PostgresWriter, table_identifier

if TYPE_CHECKING:
    from eo_jobs.sinks.jvm import JvmSink
    from eo_jobs.sinks.table_writer import TableWriter, TaskWrite
    from eo_jobs.spec.models import TableSink


def dead_letter_problems(conn: psycopg.Connection[Any], table: str) -> list[str]:
    """Why this connection's role cannot use the dead-letter table (empty: it can).

    Each problem names the statements to run.
    """
    ident = table_identifier(table)
    name = ident.as_string(conn)
    schema = psycopg.sql.Identifier(table.partition(".")[0]).as_string(conn)
    row = conn.execute(
        """SELECT current_user, to_regclass(%(t)s) IS NOT NULL,
                  CASE WHEN to_regclass(%(t)s) IS NOT NULL
                       THEN has_table_privilege(to_regclass(%(t)s), 'INSERT') END,
                  CASE WHEN to_regnamespace(%(s)s) IS NOT NULL
                       THEN has_schema_privilege(to_regnamespace(%(s)s), 'CREATE') END""",
        {"t": name, "s": schema},
    ).fetchone()
    assert row is not None
    user, exists, can_insert, can_create = str(row[0]), bool(row[1]), row[2], row[3]
    grant = f"GRANT INSERT ON {name} TO {psycopg.sql.Identifier(user).as_string(conn)}"
    if exists:
        return [] if can_insert else [f"dead-letter table {table}: no INSERT; run {grant}"]
    if can_create:
        return []
    create = psycopg.sql.SQL(DEAD_LETTER_DDL.replace("IF NOT EXISTS ", "")).format(ident)
    return [
        f"dead-letter table {table} does not exist and {user} may not create it (no CREATE on "
        f"schema {schema}); as an administrator run: {create.as_string(conn)}; {grant}"
    ]


class PostgresKind:
    """PostgreSQL sinks: COPY (binary or CSV from Arrow), PREPARE TRANSACTION."""

    name = "postgresql"

    def ping(self, dsn: str) -> str:
        """Connect and disconnect (the DSN's connect_timeout, else 10 s); the role."""
        try:
            options = psycopg.conninfo.conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise ValueError(str(exc)) from None
        try:
            with psycopg.connect(dsn, connect_timeout=options.get("connect_timeout", 10)) as conn:
                return str(conn.info.user)
        except psycopg.OperationalError as exc:
            raise ConnectionError(str(exc).strip() or repr(exc)) from exc

    def writer(self, sink: TableSink, dsn: str, columns: tuple[str, ...]) -> PostgresWriter:
        """The sink's picklable writer of ``columns``."""
        return PostgresWriter(
            dsn=dsn,
            table=sink.table,
            columns=columns,
            mode=sink.mode,
            key_columns=tuple(sink.key_columns),
            version_column=sink.version_column,
            add_columns=tuple(sink.add_columns),
        )

    def dead_letter_writer(self, dsn: str, table: str) -> PostgresWriter:
        """The writer of the dead-letter table ``table`` in ``dsn``'s database."""
        return PostgresWriter(dsn=dsn, table=table, columns=DEAD_LETTER_COLUMNS)

    def ensure_dead_letter_table(self, dsn: str, table: str) -> None:
        """Create the dead-letter table if missing.

        ``CREATE TABLE IF NOT EXISTS`` checks CREATE on the schema before existence, so it runs
        only when the table is missing: a role with INSERT on an existing table starts without
        CREATE (docs/protocol.md, "Privileges"; ``contract_problems`` refused a role that can
        do neither).
        """
        with psycopg.connect(dsn, autocommit=True) as conn:
            name = table_identifier(table).as_string(conn)
            if conn.execute("SELECT to_regclass(%s)", (name,)).fetchone() == (None,):
                conn.execute(psycopg.sql.SQL(DEAD_LETTER_DDL).format(table_identifier(table)))

    def contract_problems(
        self,
        sink: TableSink,
        dsn: str,
        written: Sequence[tuple[str, str]],
        *,
        two_phase: bool,
        dead_letter_table: str | None,
    ) -> list[str]:
        """``contract.check_contract``, the column types, and the dead-letter table's rights
        (when this sink's role writes dead letters: ``dead_letter_table`` is set)."""
        with psycopg.connect(dsn, autocommit=True) as conn:
            return [
                str(p)
                for p in [
                    *check_contract(
                        conn,
                        sink.table,
                        columns=[name for name, _ in written],
                        mode=sink.mode,
                        key_columns=sink.key_columns,
                        two_phase=two_phase,
                        add_columns=sink.add_columns,
                        sum_columns=sink.sum_columns,
                        audit_column=sink.audit_column,
                    ),
                    *column_type_problems(conn, sink.table, written),
                    *(
                        dead_letter_problems(conn, dead_letter_table)
                        if dead_letter_table is not None
                        else []
                    ),
                ]
            ]

    def run_task(self, task: TaskWrite, batches: Iterable[Any], gid: str) -> tuple[int, int]:
        """One writer task's transaction from Arrow batches: ``(rows, dead letters)``."""
        writer = task.writer
        assert isinstance(writer, PostgresWriter)
        dead = None
        if task.dead_letters is not None:
            assert isinstance(task.dead_letters, PostgresWriter)
            dead = DeadLetters(task.dead_letters, task.pipeline, task.batch_id)
        letters = task.refused_letters()
        assert letters is None or isinstance(letters, PostgresWriter)
        refused = Refused(
            task.batch_id,
            None if letters is None else DeadLetters(letters, task.pipeline, task.batch_id),
            task.kept_memory_bytes,
        )
        count = writer.write_with(
            arrow_body(writer, batches, dead, refused),
            gid=gid if task.two_phase else None,
            pipeline=task.pipeline,
            batch_id=task.batch_id,
        )
        dead_count = (len(dead.rows) if dead else 0) + len(
            refused.letters.rows if refused.letters else []
        )
        return count, dead_count

    def jvm_sink(self, writer: TableWriter) -> JvmSink | str:
        """The sink's part of eo's JVM writer (``sinks.postgres.jvm``)."""
        return postgres_jvm_sink(writer)
