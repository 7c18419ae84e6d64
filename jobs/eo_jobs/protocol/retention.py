"""How far back phase 2 may prune markers while the operator's audit still needs them.

The audit checks each decided batch's participants against their markers (``eo.markers``), so a
marker pruned before the audit reached its batch leaves that batch checked only in part. The
operator records how far its audit got, per streaming query, in the control database
(``eo.audited``); the driver's prune then stops below that position. Bounded, so that an audit
that stopped (operator down, audit switched off while the operator was away, a pipeline moved to
another cluster) or that cannot keep up never makes markers grow without limit:

* a position not refreshed for ``AUDIT_HOLD_SECONDS`` (a week) is ignored: the audit is gone,
  and pruning is what it was without one;
* markers are never kept more than ``AUDIT_HOLD_BATCHES`` batches behind the batch being
  committed, whatever the position says: at 3 participants a batch, 100,000 batches are
  ~300,000 rows of ~100 bytes, tens of MB, and a pruning scan that stays cheap. An audit that far
  behind reports the pruned batches' participants as not checked (``partial``), never as
  passed.

The table is created by the operator (the writer of positions) when it first records one, not
by the control schema's bootstrap: a driver with a least-privilege role must keep starting
against a schema an older eo created. A driver reads it only when it exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg

from eo_jobs.protocol.control import MARKER_RETENTION_BATCHES, SCHEMA_LOCK_KEY

AUDIT_HOLD_SECONDS = 7 * 24 * 3600.0
"""An audit position older than this no longer holds markers back."""
AUDIT_HOLD_BATCHES = 100_000
"""Markers are never held more than this many batches behind the batch being committed."""

AUDITED_DDL = """CREATE TABLE IF NOT EXISTS eo.audited (
    pipeline text NOT NULL,
    query text NOT NULL,
    batch_id bigint NOT NULL,
    audited_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (pipeline, query))"""
"""Per pipeline and streaming query (its gid token), the last batch the audit made final."""


def prune_below(committing: int, audited: int | None) -> int:
    """The batch id below which markers may be pruned after committing batch ``committing``.

    Without an audit position: ``MARKER_RETENTION_BATCHES`` behind. With one: also not past the
    audited batch (its markers and everything before are no longer needed), but never more than
    ``AUDIT_HOLD_BATCHES`` behind.
    """
    bound = committing - MARKER_RETENTION_BATCHES
    if audited is None:
        return bound
    return min(bound, max(audited + 1, committing - AUDIT_HOLD_BATCHES))


def record_audited(
    conn: psycopg.Connection[Any], pipeline: str, batches: Mapping[str, int]
) -> None:
    """Save the audit position (query token -> last audited batch), creating the table once."""
    if conn.execute("SELECT to_regclass('eo.audited')").fetchone() == (None,):
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_KEY,))
            conn.execute(AUDITED_DDL)
    with conn.transaction():
        for query, batch in batches.items():
            conn.execute(
                """INSERT INTO eo.audited (pipeline, query, batch_id) VALUES (%s, %s, %s)
                   ON CONFLICT (pipeline, query) DO UPDATE
                   SET batch_id = EXCLUDED.batch_id, audited_at = clock_timestamp()""",
                (pipeline, query, batch),
            )


def forget_audited(conn: psycopg.Connection[Any], pipeline: str) -> None:
    """Drop the pipeline's positions (its audit was switched off): pruning goes back to normal."""
    if conn.execute("SELECT to_regclass('eo.audited')").fetchone() != (None,):
        conn.execute("DELETE FROM eo.audited WHERE pipeline = %s", (pipeline,))


def audited_batch(conn: psycopg.Connection[Any], pipeline: str, query: str) -> int | None:
    """The audited batch of a query that still holds markers back (recent enough), else None."""
    if conn.execute("SELECT to_regclass('eo.audited')").fetchone() == (None,):
        return None
    found = conn.execute(
        """SELECT batch_id FROM eo.audited
           WHERE pipeline = %s AND query = %s
             AND audited_at > clock_timestamp() - make_interval(secs => %s)""",
        (pipeline, query, AUDIT_HOLD_SECONDS),
    ).fetchone()
    return None if found is None else int(found[0])
