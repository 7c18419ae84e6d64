"""Sink calls cannot hang a reconcile: a lock held by another session makes the operator's
recovery fail within the lock timeout, through the real Reconciler against the real
PostgreSQL, and the next pass succeeds once the lock is gone."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from eo_jobs.protocol.connection import LOCK_TIMEOUT_MS
from tests.operator.reconcile_env import NAME, Scene

pytestmark = [pytest.mark.slow]


def test_a_lock_held_by_another_session_fails_the_recovery_within_the_lock_timeout(
    reconcile_scene: Scene,
) -> None:
    scene = reconcile_scene
    scene.control().ensure_schema()
    scene.apply()
    failure: list[BaseException] = []
    limit = LOCK_TIMEOUT_MS / 1000 + 10
    with psycopg.connect(scene.dsn) as other:
        # An administrator's long transaction (a migration, a VACUUM FULL) on the fence table.
        other.execute("LOCK TABLE eo.fence IN ACCESS EXCLUSIVE MODE")

        def reconcile() -> None:
            try:
                scene.reconciler.reconcile(scene.namespace, NAME)
            except BaseException as exc:
                failure.append(exc)

        started = time.monotonic()
        thread = threading.Thread(target=reconcile, daemon=True)
        thread.start()
        thread.join(limit)
        waited = time.monotonic() - started
        hung = thread.is_alive()
        other.rollback()
    thread.join(30)
    assert not hung, f"the reconcile still waited on the lock after {waited:.0f}s"
    assert len(failure) == 1 and isinstance(failure[0], psycopg.errors.LockNotAvailable), failure
    deadline = time.monotonic() + 60
    while (scene.get().get("status") or {}).get("phase") != "Suspended":
        assert time.monotonic() < deadline
        scene.reconcile()
