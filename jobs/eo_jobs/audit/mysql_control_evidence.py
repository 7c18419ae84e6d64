"""Reading the decision log of a MySQL/MariaDB control database (``protocol.mysql_control``).

The same ``ControlEvidence`` and ``LoggedDecision`` ``evidence.read_control`` reads from
PostgreSQL's schema ``eo``, here from ``eo_fence`` and ``eo_decisions`` of the control
database, in one ``START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY``: one InnoDB snapshot
for the fence and every query's decisions, and a transaction that cannot write, so the auditor
never repairs what it should find. JSON columns are text here and parsed in Python.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from eo_jobs.audit.evidence import ControlEvidence, LoggedDecision
from eo_jobs.protocol.gid import query_token
from eo_jobs.protocol.mysql_control import MySqlControlStore

_COLUMNS = "query_id, batch_id, epoch, participants, source_offsets, rows_written, decided_at, sums"


def read_mysql_control(
    dsn: str, pipeline: str, positions: Mapping[str, int], max_batches: int | None
) -> ControlEvidence:
    """``evidence.read_control`` for a MySQL/MariaDB control database."""
    store = MySqlControlStore(dsn)
    try:
        conn = store.connection()
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            cur.execute(
                "SELECT COUNT(*), UTC_TIMESTAMP(6) FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ('eo_fence', 'eo_decisions')"
            )
            row = cur.fetchone()
            assert row is not None
            now = _aware(row[1])
            if int(row[0]) != 2:
                cur.execute("COMMIT")
                return ControlEvidence(False, None, (), {}, now)
            cur.execute("SELECT epoch FROM `eo_fence` WHERE pipeline = %s", (pipeline,))
            fence = cur.fetchone()
            cur.execute(
                "SELECT query_id, MAX(batch_id) FROM `eo_decisions` WHERE pipeline = %s "
                "GROUP BY query_id",
                (pipeline,),
            )
            queries = list(cur.fetchall())
            decisions: list[LoggedDecision] = []
            for query_id, _ in queries:
                start = positions.get(query_token(str(query_id)), -1)
                # MySQL has no LIMIT ALL: the largest BIGINT stands for no limit.
                limit = 2**63 - 1 if max_batches is None else max_batches + (start >= 0)
                cur.execute(
                    f"SELECT {_COLUMNS} FROM `eo_decisions`"  # noqa: S608 (a constant)
                    " WHERE pipeline = %s AND query_id = %s AND batch_id >= %s"
                    " ORDER BY batch_id LIMIT %s",
                    (pipeline, query_id, start, limit),
                )
                decisions.extend(_decision(r) for r in cur.fetchall())
            cur.execute("COMMIT")
    finally:
        store.close()
    return ControlEvidence(
        True,
        None if fence is None else int(fence[0]),
        tuple(decisions),
        {str(q): int(b) for q, b in queries},
        now,
        True,
    )


def read_mysql_decisions_of(
    dsn: str, pipeline: str, batches: Iterable[int]
) -> list[LoggedDecision]:
    """``evidence.read_decisions_of`` for a MySQL/MariaDB control database."""
    wanted = tuple(sorted(set(batches)))
    if not wanted:
        return []
    store = MySqlControlStore(dsn)
    try:
        rows = store.query(
            f"SELECT {_COLUMNS} FROM `eo_decisions`"  # noqa: S608 (a constant)
            " WHERE pipeline = %s AND batch_id IN %s",
            (pipeline, wanted),
        )
    finally:
        store.close()
    return [_decision(r) for r in rows]


def _aware(value: datetime) -> datetime:
    """A naive timestamp read in the store's UTC session, made aware."""
    return value.replace(tzinfo=UTC)


def _decision(row: tuple[Any, ...]) -> LoggedDecision:
    q, b, e, p, o, r, t, sums = row
    return LoggedDecision(
        str(q),
        int(b),
        int(e),
        tuple(json.loads(p)),
        None if o is None else json.loads(o),
        int(r),
        _aware(t),
        None if sums is None else json.loads(sums),
    )
