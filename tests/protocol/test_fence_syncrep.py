"""A fence raise never ends a decision that waits for synchronous replication.

Such a decision is committed locally already; ending its backend makes it visible without its
standby having it, and a failover to that standby would lose a decision whose participants a
sink on another server keeps. The raise waits (its lock timeout) instead.

A server of its own: ``synchronous_standby_names`` is server-wide, and a standby that never
comes (``none_such``) would hold every commit of the shared server. Its default
``synchronous_commit = local`` keeps set-up commits from waiting; the decision sets ``on``
itself, as it does in production, and waits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from eo_jobs.pgserver import temporary_server
from eo_jobs.protocol.control import STUCK_HOLDER_SECONDS, ControlStore
from tests.protocol import harness


@pytest.fixture(scope="module")
def syncrep_dsn() -> Iterator[str]:
    """A database on a server whose synchronous standby never connects."""
    settings = {
        "fsync": "off",
        "synchronous_standby_names": "none_such",
        "synchronous_commit": "local",
    }
    with temporary_server(settings=settings) as server:
        yield server.create_database("syncrep")


def _waiting_for_syncrep(dsn: str, pid: int) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT wait_event FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
    return row is not None and row[0] == "SyncRep"


def test_a_decision_waiting_for_its_standby_is_not_ended_by_a_fence_raise(
    syncrep_dsn: str,
) -> None:
    control = ControlStore(syncrep_dsn)
    control.ensure_schema()
    control.raise_fence(harness.PIPELINE, 1)
    decider = ControlStore(syncrep_dsn)
    decider_pid = decider.connection().info.backend_pid
    outcome: list[BaseException | float] = []

    def decide() -> None:
        try:
            outcome.append(
                decider.decide(
                    pipeline=harness.PIPELINE,
                    query_id=harness.QUERY,
                    batch_id=0,
                    epoch=1,
                    participants=["p"],
                    source_offsets=None,
                    rows_written=1,
                    prepare_ms=0.0,
                )
            )
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=decide, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not _waiting_for_syncrep(syncrep_dsn, decider_pid):
        assert time.monotonic() < deadline and not outcome, outcome
        time.sleep(0.05)

    # Longer than STUCK_HOLDER_SECONDS, so the stuck-holder watch has looked at the decider.
    raiser = ControlStore(syncrep_dsn, lock_timeout_ms=int(STUCK_HOLDER_SECONDS * 1000) + 3000)
    with pytest.raises(psycopg.errors.LockNotAvailable):
        raiser.raise_fence(harness.PIPELINE, 2)
    assert _waiting_for_syncrep(syncrep_dsn, decider_pid), outcome
    assert not outcome  # still waiting for its standby, not terminated
    with psycopg.connect(syncrep_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_cancel_backend(%s)", (decider_pid,))  # let the test end
    thread.join(20)
