"""Reading a MySQL/MariaDB sink's evidence: markers, prepared branches, the table's count.

The same ``SinkEvidence`` ``evidence.read_sink`` reads from PostgreSQL, from
``START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY``: one InnoDB snapshot for the markers
and the table (a branch's rows and its marker commit together), and a transaction that cannot
write, so the auditor never repairs what it should find. ``XA RECOVER`` gives no prepare time:
a branch's age is counted from when this process first listed it (kept across passes), so the
prepared-too-long check fires one bound after the operator first saw the branch, never earlier.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal

import pymysql.cursors

from eo_jobs.audit.evidence import Marker, Prepared, SinkEvidence
from eo_jobs.protocol.gid import Gid, pipeline_prefix, pipeline_token, sink_token
from eo_jobs.protocol.mysql_xa import (
    MARKERS_TABLE,
    MySqlPreparedTransactions,
    gid_of,
)
from eo_jobs.protocol.participants import PRUNED_PREFIX
from eo_jobs.sinks.mysql.writer import quote_identifier, table_identifier

_first_listed: dict[tuple[str, str], datetime] = {}
"""(database label, gid) -> when this process first saw the branch prepared."""


def read_mysql_sink(
    dsn: str,
    pipeline: str,
    sink: str,
    positions: Mapping[str, int],
    *,
    table: str | None = None,
    batch_column: str | None = None,
    sum_columns: Sequence[str] = (),
    whole_table: bool = True,
) -> SinkEvidence:
    """``evidence.read_sink`` for a MySQL/MariaDB sink database."""
    token = sink_token(sink)
    floor = min(positions.values(), default=-1)
    store = MySqlPreparedTransactions(dsn)
    try:
        conn = store.connection()
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
                (MARKERS_TABLE,),
            )
            row = cur.fetchone()
            evidence = SinkEvidence(sink, bool(row and row[0]), {}, now=datetime.now(UTC))
            if evidence.has_markers:
                markers = quote_identifier(MARKERS_TABLE)
                horizon_prefix = PRUNED_PREFIX + pipeline_token(pipeline) + ":"
                cur.execute(
                    f"SELECT gid, batch_id FROM {markers} WHERE gid LIKE %s",  # noqa: S608
                    (_like_prefix(horizon_prefix),),
                )
                for gid, batch in cur.fetchall():
                    evidence.horizons[str(gid)[len(horizon_prefix) :]] = int(batch)
                cur.execute(
                    f"SELECT gid, batch_id, rows_written FROM {markers}"  # noqa: S608
                    " WHERE pipeline = %s AND batch_id > %s AND gid LIKE %s",
                    (pipeline, floor, _like_prefix(pipeline_prefix(pipeline))),
                )
                for gid, batch, rows in cur.fetchall():
                    parsed = Gid.parse(str(gid))
                    if parsed is not None and parsed.sink == token:
                        evidence.markers[str(gid)] = Marker(str(gid), parsed, int(batch), int(rows))
            if table is not None:
                _read_table(cur, evidence, table, floor, batch_column, sum_columns, whole_table)
            cur.execute("COMMIT")
        label = store.label()
        for xid in store.recovered():
            gid = gid_of(xid, store.target.database)
            parsed = None if gid is None else Gid.parse(gid)
            if gid is None or parsed is None or parsed.sink != token:
                continue
            if not gid.startswith(pipeline_prefix(pipeline)):
                continue
            seen = _first_listed.setdefault((label, gid), datetime.now(UTC))
            evidence.prepared[gid] = Prepared(gid, parsed, seen)
    finally:
        store.close()
    return evidence


def _like_prefix(prefix: str) -> str:
    """A LIKE pattern matching strings that start with ``prefix`` (wildcards escaped)."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _read_table(
    cur: pymysql.cursors.Cursor,
    evidence: SinkEvidence,
    table: str,
    floor: int,
    batch_column: str | None,
    sum_columns: Sequence[str],
    whole_table: bool,
) -> None:
    """count(*) and the sums (``whole_table``), and per batch above ``floor``; sums of
    integer or DECIMAL columns are exact DECIMALs in MySQL, read as text."""
    ident = table_identifier(table)
    summed: list[str] = []
    if sum_columns:
        cur.execute(f"SELECT * FROM {ident} LIMIT 0")  # noqa: S608
        present = {d[0] for d in cur.description or ()}
        summed = [c for c in sum_columns if c in present]
        evidence.missing_sum_columns = tuple(c for c in sum_columns if c not in present)
    sums = "".join(f", CAST(SUM({quote_identifier(c)}) AS CHAR)" for c in summed)
    if whole_table:
        cur.execute(f"SELECT COUNT(*){sums} FROM {ident}")  # noqa: S608
        counted = cur.fetchone()
        assert counted is not None
        evidence.table_rows = int(counted[0])
        if sum_columns:
            evidence.table_sums = dict(zip(summed, map(_decimal, counted[1:]), strict=True))
    if batch_column is not None:
        column = quote_identifier(batch_column)
        cur.execute(
            f"SELECT {column}, COUNT(*){sums} FROM {ident} "  # noqa: S608
            f"WHERE {column} > %s GROUP BY {column}",
            (floor,),
        )
        for batch, rows, *batch_sums in cur.fetchall():
            if batch is not None:
                evidence.rows_by_batch[int(batch)] = int(rows)
                if summed:
                    evidence.sums_by_batch[int(batch)] = dict(
                        zip(summed, map(_decimal, batch_sums), strict=True)
                    )


def _decimal(text: object) -> Decimal:
    """A sum read as text; NULL (no rows, or only NULLs) is 0."""
    return Decimal(0) if text is None else Decimal(str(text))
