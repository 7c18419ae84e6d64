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


def _condition(scene: Scene, kind: str) -> dict[str, str]:
    conds = (scene.get().get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == kind), {})


def _uid(scene: Scene) -> str:
    return str(scene.get()["metadata"]["uid"])


def test_a_fence_another_writer_raised_to_the_planned_epoch_is_jumped(
    reconcile_scene: Scene,
) -> None:
    scene = reconcile_scene
    control = scene.control()
    control.ensure_schema()
    control.raise_fence(scene.key, 1)  # another writer's driver of epoch 1, owner unknown
    scene.apply()  # a new object plans epoch 1
    with pytest.raises(RetrySoon):
        scene.reconciler.reconcile(scene.namespace, NAME)
    assert scene.annotation() == 2
    assert _suspended_at(scene) == 2
    fence = control.fence(scene.key)
    assert fence is not None and (fence.epoch, fence.owner) == (2, _uid(scene))


def test_a_restored_object_without_status_does_not_reuse_its_annotated_epoch(
    reconcile_scene: Scene,
) -> None:
    # A restore (Velero keeps annotations, not status) of an object whose driver ran with 1.
    scene = reconcile_scene
    control = scene.control()
    control.ensure_schema()
    control.raise_fence(scene.key, 1)
    scene.apply(metadata={"annotations": {"eo.dev/epoch": "1"}})
    with pytest.raises(RetrySoon):
        scene.reconciler.reconcile(scene.namespace, NAME)
    assert scene.annotation() == 2
    assert _suspended_at(scene) == 2


def test_the_object_that_claimed_the_fence_reuses_its_reserved_epoch(
    reconcile_scene: Scene,
) -> None:
    # The operator died between its fence raise and the end of the recovery: the next pass
    # completes that recovery with the same epoch instead of burning another one.
    scene = reconcile_scene
    scene.apply()
    assert _suspended_at(scene) == 1
    scene.cluster.kubectl(
        "annotate", "eop", NAME, "-n", scene.namespace, "eo.dev/epoch=2", "--overwrite"
    )
    scene.control().raise_fence(scene.key, 2, _uid(scene))
    assert _suspended_at(scene) == 2
    assert "FenceAhead" not in scene.events()


OTHER = "0b8f6c1e-uid-of-the-same-pipeline-in-cluster-a"


def test_a_pipeline_whose_fence_another_writer_owns_waits_launching_nothing(
    reconcile_scene: Scene,
) -> None:
    scene = reconcile_scene
    control = scene.control()
    control.ensure_schema()
    control.raise_fence(scene.key, 1, OTHER)  # the same pipeline, running in another cluster
    scene.apply(suspend=False)
    for _ in range(3):
        scene.reconcile()
    status = scene.get()["status"]
    owned = _condition(scene, "FenceOwned")
    assert (status["phase"], owned.get("status"), owned.get("reason")) == (
        "Waiting",
        "False",
        "ForeignFenceOwner",
    ), status
    hand_over = f"kubectl -n {scene.namespace} annotate eop {NAME} eo.dev/adopt-fence={OTHER}"
    assert OTHER in owned["message"] and hand_over in owned["message"]
    assert scene.events().count("ForeignFenceOwner:") == 1
    assert scene.pods() == []
    assert scene.annotation() == 0  # no epoch reserved for nothing
    fence = control.fence(scene.key)
    assert fence is not None and (fence.epoch, fence.owner) == (1, OTHER)


def test_the_adopt_annotation_hands_the_fence_over_strictly_above_the_old_owners_epoch(
    reconcile_scene: Scene,
) -> None:
    scene = reconcile_scene
    control = scene.control()
    control.ensure_schema()
    control.raise_fence(scene.key, 1, OTHER)
    scene.apply()
    scene.reconcile()  # meets the owner
    scene.reconcile()  # records it
    assert _condition(scene, "FenceOwned").get("reason") == "ForeignFenceOwner"
    scene.cluster.kubectl(
        "annotate", "eop", NAME, "-n", scene.namespace, f"eo.dev/adopt-fence={OTHER}"
    )
    assert _suspended_at(scene) == 2
    fence = control.fence(scene.key)
    assert fence is not None and (fence.epoch, fence.owner) == (2, _uid(scene))
    assert "eo.dev/adopt-fence" not in scene.get()["metadata"]["annotations"]  # one-shot
    assert f"FenceAdopted: took over the sink fence of {scene.key} from {OTHER}" in scene.events()
    assert _condition(scene, "FenceOwned").get("status") == "True"


def test_a_fence_released_by_the_other_writers_deletion_is_taken_without_a_hand_over(
    reconcile_scene: Scene,
) -> None:
    scene = reconcile_scene
    control = scene.control()
    control.ensure_schema()
    control.raise_fence(scene.key, 4, OTHER)
    scene.apply()
    scene.reconcile()
    assert scene.get()["status"]["phase"] == "Suspended"  # suspended, and waiting for the fence
    assert control.release_fence(scene.key, OTHER)  # its object was deleted there
    assert _suspended_at(scene) == 5


def test_deleting_a_pipeline_whose_fence_another_writer_owns_leaves_the_fence_alone(
    reconcile_scene: Scene,
) -> None:
    scene = reconcile_scene
    control = scene.control()
    control.ensure_schema()
    control.raise_fence(scene.key, 3, OTHER)
    scene.apply()
    scene.reconcile()
    summary = scene.reconciler.finalize(scene.namespace, NAME)
    assert f"owned by {OTHER}" in summary
    fence = control.fence(scene.key)
    assert fence is not None and (fence.epoch, fence.owner) == (3, OTHER)


def test_deleting_a_pipeline_releases_the_fence_it_owns(reconcile_scene: Scene) -> None:
    scene = reconcile_scene
    scene.apply()
    assert _suspended_at(scene) == 1
    summary = scene.reconciler.finalize(scene.namespace, NAME)
    assert "fence released" in summary
    fence = scene.control().fence(scene.key)
    assert fence is not None and (fence.epoch, fence.owner) == (2, None)
