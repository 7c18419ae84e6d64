"""Helpers of the writer tests: a gid per task, and committing a branch through the
participant store, which proves the rows survive XA PREPARE and XA COMMIT from another
session."""

from __future__ import annotations

from typing import Any

from eo_jobs.protocol.gid import Gid
from eo_jobs.protocol.mysql_xa import MySqlPreparedTransactions
from eo_jobs.protocol.participants import Outcome

PIPELINE = "default/orders"
QUERY = "5d0c6a1e-2b7f-4c3a-9e8d-112233445566"


def gid(batch: int = 0, task: int = 0) -> str:
    """The gid of one writer task's branch of batch ``batch``."""
    return str(
        Gid.build(
            pipeline=PIPELINE,
            query_id=QUERY,
            sink="orders",
            epoch=1,
            batch=batch,
            task=task,
            attempt=0,
        )
    )


def commit(store: MySqlPreparedTransactions, branch: str) -> None:
    """Commit a prepared branch from the store's own session (the writer's is closed)."""
    assert store.commit(branch) == Outcome.COMMITTED


def select(store: MySqlPreparedTransactions, statement: str) -> list[tuple[Any, ...]]:
    """Rows of a statement on the store's (committed-data) session, times read in UTC."""
    store.query("SET time_zone = '+00:00'")
    return [tuple(row) for row in store.query(statement)]
