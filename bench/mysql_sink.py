"""The bench's MariaDB: its server, the sink table of the MySQL variants, and their audit.

Issue 29 item 5 measures eo's MySQL sink against Spark's JDBC writer into the same server. Both
variants write the same events (``bench/data.py``) into ``bench.orders``, an InnoDB table with
no key (as the PostgreSQL variants' ``public.orders``: a duplicate must be able to land so that
it can be counted), recreated empty before every run; the audit reads it back with the same
rules as :func:`bench.data.audit`, in MariaDB's SQL.

The server is :mod:`eo_jobs.mariadbserver`'s, with the sink contract's durability (binary log
on, ``sync-binlog=1``, ``innodb-flush-log-at-trx-commit=1``: what a prepared XA branch needs to
survive a crash) and a 128 MiB buffer pool, MariaDB's default and PostgreSQL's
``shared_buffers`` default, where the tests' servers use 64 MiB.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bench.data import EPOCH_SECONDS, Audit
from eo_jobs.mariadbserver import DEFAULT_SETTINGS, MariaDbDatabase, MariaDbServer

DATABASE = "bench"
TABLE = "orders"
SETTINGS: Mapping[str, str | None] = {**DEFAULT_SETTINGS, "innodb-buffer-pool-size": "128M"}
"""The tests' server settings (the sink contract's durability), with MariaDB's default buffer
pool instead of the tests' smaller one."""

TABLE_DDL = (
    "CREATE TABLE {table} (order_id BIGINT NOT NULL, customer_id BIGINT, merchant VARCHAR(64), "
    "amount_cents BIGINT, currency VARCHAR(8), created_at TIMESTAMP(6) NULL DEFAULT NULL) "
    "ENGINE=InnoDB"
)
"""No key (duplicates land and are counted); ``TIMESTAMP(6)``: an instant to the microsecond,
so a time-zone or precision slip of either writer shows up as a wrong value."""

WRONG_VALUE = (
    "NOT (customer_id <=> MOD(order_id * 7919, 50000))"
    " OR NOT (merchant <=> CONCAT('m', MOD(order_id, 50)))"
    " OR NOT (amount_cents <=> 100 + MOD(order_id * 37, 10000))"
    " OR NOT (currency <=> ELT(MOD(order_id, 3) + 1, 'EUR', 'USD', 'GBP'))"
    " OR NOT (UNIX_TIMESTAMP(created_at) <=> %(epoch)s + order_id)"
)
""":data:`bench.data.WRONG_VALUE` in MariaDB's SQL (``<=>`` is ``IS NOT DISTINCT FROM``)."""


AUDIT_SELECT = (
    "SELECT COUNT(*), COUNT(*) - COUNT(DISTINCT order_id),"
    " %(events)s - COUNT(DISTINCT CASE WHEN order_id BETWEEN 0 AND %(last)s THEN order_id END),"
    " COALESCE(SUM(order_id IS NULL OR order_id NOT BETWEEN 0 AND %(last)s), 0),"
    f" COALESCE(SUM({WRONG_VALUE}), 0)"
)
"""Rows, duplicates, missing ids, unexpected ids, wrong values: :data:`bench.data.audit`'s."""


def quote(name: str) -> str:
    """A MariaDB identifier in backquotes (a backquote inside is doubled)."""
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class SinkTable:
    """The MySQL variants' sink: a table in a database of the bench's MariaDB server."""

    db: MariaDbDatabase
    table: str = TABLE

    @property
    def name(self) -> str:
        """``database.table``, as a ``sinks[].mysql.table`` names it (and Spark's JDBC writer)."""
        return f"{self.db.name}.{self.table}"

    @property
    def quoted(self) -> str:
        """The table's name quoted for SQL."""
        return f"{quote(self.db.name)}.{quote(self.table)}"

    @property
    def jdbc_url(self) -> str:
        """The URL Spark's JDBC writer is given (see :data:`JDBC_OPTIONS`)."""
        server = self.db.server
        return f"jdbc:mysql://127.0.0.1:{server.port}/{self.db.name}?{JDBC_OPTIONS}"


JDBC_OPTIONS = "permitMysqlScheme&useBulkStmtsForInserts=true"
"""Connector/J 3.x options of the JDBC baseline's URL.

``jdbc:mysql:`` with ``permitMysqlScheme`` (Connector/J accepts the scheme only with it): Spark
picks its MySQL dialect by that scheme (backquoted identifiers); under ``jdbc:mariadb:`` it would
quote with double quotes, which MariaDB reads as strings. ``useBulkStmtsForInserts`` (the default
since 3.2, stated so that it stays on): a batch of INSERTs goes to the server as one
``COM_STMT_BULK_EXECUTE``, MariaDB's fastest batched path; Connector/J 3 removed
``rewriteBatchedStatements``, which bulk execution replaces."""
JDBC_BATCH_SIZE = 10_000
"""Spark's ``batchsize`` (rows per ``executeBatch``, default 1,000): larger batches mean fewer
round trips, and Connector/J splits a bulk command at ``max_allowed_packet`` itself."""


def fresh_table(server: MariaDbServer, database: str = DATABASE) -> SinkTable:
    """``database`` dropped and created again with an empty sink table (one run's)."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {quote(database)}")
    sink = SinkTable(server.create_database(database))
    create_table(sink)
    return sink


def create_table(sink: SinkTable) -> None:
    """Create the (empty) sink table."""
    with sink.db.connect() as conn, conn.cursor() as cur:
        cur.execute(TABLE_DDL.format(table=sink.quoted))


def audit(sink: SinkTable, events: int) -> Audit:
    """Rows, duplicates, missing and unexpected ids and wrong values of the table in one query;
    ``in_doubt``: the server's prepared XA branches (``XA RECOVER``; the bench's server holds
    the bench's only)."""
    # The table's name is quoted by quote(); the values are bound parameters.
    query = f"{AUDIT_SELECT} FROM {sink.quoted}"
    with sink.db.connect() as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(query, {"events": events, "last": events - 1, "epoch": EPOCH_SECONDS})
        row = cur.fetchone()
        cur.execute("XA RECOVER")
        prepared = len(cur.fetchall())
    assert row is not None
    rows, duplicates, missing, unexpected, wrong = (int(value) for value in row)
    return Audit(rows, duplicates, missing, unexpected, wrong, prepared)


def version(server: MariaDbServer) -> str:
    """The server's ``VERSION()``."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        row = cur.fetchone()
    return str(row[0]) if row else "?"
