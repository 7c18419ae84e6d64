"""The lifecycle records of a PostgreSQL control database (``eo.lifecycle``).

One row per lifecycle action a driver did (``runtime.lifecycle``): a snapshot or a start-over,
keyed by its nonce. The row of a start-over is written in the transaction that deletes the old
queries' decisions, so a start-over happens once per nonce whatever crashes around it; the rows
are what the operator lists in ``status.lifecycle``.

The table is created by the first record, not by the control schema's bootstrap: a driver with
a least-privilege role keeps starting against a schema an older eo created, and only a pipeline
that uses ``spec.lifecycle`` needs it (or an administrator creates it: ``LIFECYCLE_DDL``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row

from eo_jobs.protocol.control import SCHEMA_LOCK_KEY
from eo_jobs.protocol.control_api import LifecycleRecord

LIFECYCLE_DDL = """CREATE TABLE IF NOT EXISTS eo.lifecycle (
    pipeline text NOT NULL,
    kind text NOT NULL CHECK (kind IN ('snapshot', 'start-over')),
    nonce text NOT NULL,
    name text NOT NULL,
    epoch bigint NOT NULL,
    detail jsonb NOT NULL,
    taken_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    pruned_at timestamptz,
    PRIMARY KEY (pipeline, kind, nonce))"""


def _exists(conn: psycopg.Connection[Any]) -> bool:
    return conn.execute("SELECT to_regclass('eo.lifecycle')").fetchone() != (None,)


def records(conn: psycopg.Connection[Any], pipeline: str) -> list[LifecycleRecord]:
    """The pipeline's records, oldest first ([] without the table)."""
    if not _exists(conn):
        return []
    rows = (
        conn.cursor(row_factory=dict_row)
        .execute(
            """SELECT * FROM eo.lifecycle WHERE pipeline = %s ORDER BY taken_at, kind, nonce""",
            (pipeline,),
        )
        .fetchall()
    )
    return [
        LifecycleRecord(
            pipeline=r["pipeline"],
            kind=r["kind"],
            nonce=r["nonce"],
            name=r["name"],
            epoch=int(r["epoch"]),
            detail=dict(r["detail"]),
            taken_at=r["taken_at"],
            pruned_at=r["pruned_at"],
        )
        for r in rows
    ]


class _AlreadyRecorded(Exception):  # noqa: N818
    """Rolls ``record_once``'s transaction back: its nonce was recorded already."""


def record_once(
    conn: psycopg.Connection[Any], entry: LifecycleRecord, forget: Sequence[str]
) -> int | None:
    """Insert ``entry`` and delete the decisions of ``forget`` in one transaction; the
    decisions deleted, None when the nonce was recorded already (then nothing is deleted)."""
    if not _exists(conn):
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_KEY,))
            conn.execute(LIFECYCLE_DDL)
    try:
        with conn.transaction():
            deleted = 0
            if forget:
                deleted = conn.execute(
                    "DELETE FROM eo.decisions WHERE pipeline = %s AND query_id = ANY(%s)",
                    (entry.pipeline, list(forget)),
                ).rowcount
            detail = {**entry.detail, **({"forgottenDecisions": deleted} if forget else {})}
            inserted = conn.execute(
                """INSERT INTO eo.lifecycle (pipeline, kind, nonce, name, epoch, detail)
                   VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING""",
                (
                    entry.pipeline,
                    entry.kind,
                    entry.nonce,
                    entry.name,
                    entry.epoch,
                    json.dumps(detail),
                ),
            ).rowcount
            if inserted == 0:
                raise _AlreadyRecorded  # an earlier run recorded it: undo the delete
    except _AlreadyRecorded:
        return None
    return deleted


def prune(conn: psycopg.Connection[Any], pipeline: str, kind: str, nonce: str) -> None:
    """Mark a record's folder deleted."""
    conn.execute(
        """UPDATE eo.lifecycle SET pruned_at = clock_timestamp()
           WHERE pipeline = %s AND kind = %s AND nonce = %s AND pruned_at IS NULL""",
        (pipeline, kind, nonce),
    )
