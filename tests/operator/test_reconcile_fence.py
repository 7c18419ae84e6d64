"""A sink fence ahead of the operator, through the real Reconciler: a real API server, the real
fence in PostgreSQL, no operator process (each pass is called here, so races can be staged).

The fence gets ahead when a pipeline is deleted and re-created under the same name (the
finalizer fenced it), when someone ran ``eo recover --epoch N`` or ``eo run --epoch N`` by hand,
or when it moves while the operator is in the middle of a recovery. None of these may stall the
pipeline or its deletion: the operator reserves an epoch above the fence and plans again.
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from eo_operator.reconciler import RetrySoon
from tests.operator.reconcile_env import NAME, Scene

pytestmark = [pytest.mark.slow]


def _suspended_at(scene: Scene) -> int:
    """Reconcile until Suspended with a finished recovery; the recovered epoch."""
    deadline = time.monotonic() + 60
    while True:
        scene.reconcile()
        status = scene.get().get("status") or {}
        if (
            status.get("phase") == "Suspended"
            and status.get("recoveredEpoch") == scene.annotation()
        ):
            return int(status["recoveredEpoch"])
        assert time.monotonic() < deadline, f"never Suspended: {status}"


def _waiting_on_a_lock(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'"
        ).fetchone()
    return bool(row and row[0])


def test_a_fence_raised_during_the_operators_recovery_is_jumped_not_an_error(
    reconcile_scene: Scene,
) -> None:
    scene = reconcile_scene
    scene.control().ensure_schema()
    scene.apply()
    failure: list[BaseException] = []
    with psycopg.connect(scene.dsn) as other:
        # A manual `eo recover --epoch 100` that holds the pipeline's fence lock while the
        # operator has read the fence (none) and reserved epoch 1.
        other.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('eo.fence:' || %s, 0))", (scene.key,)
        )
        other.execute("INSERT INTO eo.fence (pipeline, epoch) VALUES (%s, 100)", (scene.key,))

        def reconcile() -> None:
            try:
                scene.reconciler.reconcile(scene.namespace, NAME)
            except BaseException as exc:
                failure.append(exc)

        thread = threading.Thread(target=reconcile)
        thread.start()
        deadline = time.monotonic() + 20
        while not _waiting_on_a_lock(scene.dsn):
            assert thread.is_alive() and time.monotonic() < deadline, failure
            time.sleep(0.05)
        other.commit()
    thread.join(30)
    assert len(failure) == 1 and isinstance(failure[0], RetrySoon), failure
    assert scene.annotation() == 101
    assert "FenceAhead" in scene.events()
    assert _suspended_at(scene) == 101
    assert scene.control().fence_epoch(scene.key) == 101


def test_deleting_a_pipeline_whose_fence_is_ahead_finishes_above_the_fence(
    reconcile_scene: Scene,
) -> None:
    scene = reconcile_scene
    control = scene.control()
    control.ensure_schema()
    scene.apply()
    assert _suspended_at(scene) == 1
    control.raise_fence(scene.key, 100)  # `eo recover --epoch 100`, by hand
    summary = scene.reconciler.finalize(scene.namespace, NAME)
    assert control.fence_epoch(scene.key) == 101, summary
    assert scene.annotation() == 101


def test_the_recovered_event_names_the_fence_it_raised_from(reconcile_scene: Scene) -> None:
    # The operator raises the fence itself before it resolves; the resolution then found the
    # fence already at the new epoch, and every event read "fenced to epoch N (was N)".
    scene = reconcile_scene
    scene.apply()
    assert _suspended_at(scene) == 1
    assert "Recovered: fenced to epoch 1 (was none);" in scene.events()
