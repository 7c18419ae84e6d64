"""Every write to a pipeline is guarded by the resourceVersion of the observation it was planned
from: two operators that both believe they lead (a lease lost mid-pass, a developer's
``--standalone`` operator) plan from one observation; the first write wins, the other gets a
409, plans again from a fresh read, and never reserves a second epoch or overwrites status.

Real API server, real fence in PostgreSQL, the real Reconciler called pass by pass.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from eo_operator.kube import Conflict, Kube
from eo_operator.metrics import PipelineMetrics
from eo_operator.reconciler import Reconciler, RetrySoon, Settings
from tests.operator.reconcile_env import NAME, Scene

pytestmark = [pytest.mark.slow]


class Observed(Kube):
    """A client whose next read of the pipeline returns an observation made earlier.

    That is exactly what a second operator sees when it read the object at the same moment
    as the first, and acts after the first one's writes.
    """

    def __init__(self, kube: Kube, observation: dict[str, Any]) -> None:
        super().__init__(kube.api_client)
        self._observation: dict[str, Any] | None = copy.deepcopy(observation)

    def get_pipeline(self, namespace: str, name: str) -> dict[str, Any] | None:
        if self._observation is not None:
            observed, self._observation = self._observation, None
            return observed
        return super().get_pipeline(namespace, name)


def _operator(scene: Scene, observation: dict[str, Any]) -> Reconciler:
    kube = Observed(scene.reconciler.kube, observation)
    return Reconciler(kube, PipelineMetrics(CollectorRegistry()), Settings(job_image="eo-job:test"))


def test_a_status_write_planned_from_an_outdated_observation_is_refused(
    reconcile_scene: Scene,
) -> None:
    scene = reconcile_scene
    scene.apply()
    kube = scene.reconciler.kube
    observation = kube.get_pipeline(scene.namespace, NAME)
    assert observation is not None
    first = kube.patch_status(observation, {"phase": "Recovering", "message": "first"})
    assert first is not None
    with pytest.raises(Conflict):
        kube.patch_status(observation, {"phase": "Starting", "message": "second"})
    status = scene.get()["status"]
    assert (status["phase"], status["message"]) == ("Recovering", "first")
    assert kube.patch_status(first, {"message": "chained"}) is not None


def test_two_operators_planning_from_one_observation_reserve_one_epoch(
    reconcile_scene: Scene,
) -> None:
    scene = reconcile_scene
    scene.control().ensure_schema()
    scene.apply()
    observation = scene.reconciler.kube.get_pipeline(scene.namespace, NAME)
    assert observation is not None
    first, second = _operator(scene, observation), _operator(scene, observation)
    first.reconcile(scene.namespace, NAME)
    after_first = scene.get()
    assert scene.annotation() == 1
    with pytest.raises(RetrySoon):
        second.reconcile(scene.namespace, NAME)
    after_second = scene.get()
    # The second operator wrote nothing: no status, no epoch, no second recovery.
    assert after_second["metadata"]["resourceVersion"] == after_first["metadata"]["resourceVersion"]
    assert scene.events().count("Recovered:") == 1
    assert scene.control().fence_epoch(scene.key) == 1
    # Its next pass plans from a fresh read: the recovery is done, nothing more is reserved.
    second.reconcile(scene.namespace, NAME)
    assert scene.annotation() == 1
    assert scene.get()["status"]["phase"] == "Suspended"
    assert scene.events().count("Recovered:") == 1
