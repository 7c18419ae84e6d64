"""The upgrade that narrowed the spec hash restarts no driver (review operator-2, N6).

Every driver launched before it carries a hash of the old formula. Comparing that with the new
hash would say "spec changed" for every pipeline at once: the very restart storm the narrower
hash exists to prevent. A pod whose label is the old formula's hash of the current spec runs
that spec, so the planner leaves it alone; a real edit still restarts it.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

from prometheus_client import CollectorRegistry

from eo_jobs.spec import parse_pipeline
from eo_jobs.spec.models import Pipeline
from eo_operator.kube import Kube
from eo_operator.legacy_hash import legacy_spec_hashes
from eo_operator.metrics import PipelineMetrics
from eo_operator.planner import DriverPod, Kind, Memory, Observation, Phase, plan
from eo_operator.reconciler import Reconciler, Settings
from eo_operator.resources import (
    COMPONENT,
    LABEL_EPOCH,
    LABEL_PIPELINE,
    LABEL_SPEC_HASH,
    job_image,
    spec_hash,
)
from eo_operator.status import status_from
from tests.operator.test_spec_hash import DOC, DOC_0_1_0, LABEL_0_1_0, PRE_FIX_LABEL

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
IMAGE = "registry.example/eo-job:1.5.0"


def _pipeline(**spec: Any) -> Pipeline:
    doc = copy.deepcopy(DOC)
    doc["spec"].update(spec)
    return parse_pipeline(doc)


def _obs(pipeline: Pipeline, label: str, phase: str = "Running") -> Observation:
    """What the reconciler observes of ``pipeline`` with a driver pod labelled ``label``."""
    return Observation(
        now=NOW,
        generation=2,
        spec=pipeline.spec,
        spec_error=None,
        spec_hash=spec_hash(pipeline, job_image(pipeline, IMAGE)),
        legacy_spec_hashes=legacy_spec_hashes(pipeline),
        annotation_epoch=1,
        memory=Memory(phase=Phase.RUNNING, epoch=1),
        driver=DriverPod(name="orders-driver-e1", epoch=1, phase=phase, spec_hash=label),
    )


def test_a_driver_carrying_the_old_formulas_hash_of_the_current_spec_keeps_running() -> None:
    result = plan(_obs(_pipeline(), PRE_FIX_LABEL))
    assert result.actions == []
    assert result.memory.phase is Phase.RUNNING


def test_a_starting_driver_carrying_the_old_formulas_hash_is_not_restarted_either() -> None:
    result = plan(_obs(_pipeline(), PRE_FIX_LABEL, phase="Pending"))
    assert result.actions == []
    assert result.memory.phase is Phase.STARTING


def test_a_driver_launched_by_eo_0_1_0_keeps_running() -> None:
    result = plan(_obs(parse_pipeline(DOC_0_1_0), LABEL_0_1_0))
    assert result.actions == []


def test_a_field_eo_0_1_0_did_not_have_set_since_restarts_its_driver() -> None:
    doc = copy.deepcopy(DOC_0_1_0)
    doc["spec"]["hadoopConf"] = {"fs.s3a.connection.maximum": "64"}
    result = plan(_obs(parse_pipeline(doc), LABEL_0_1_0))
    assert result.memory.reason == "SpecChanged"


def test_an_edit_since_still_restarts_a_driver_with_the_old_formulas_hash() -> None:
    edited = _pipeline(transform={"sql": "SELECT id FROM source"})
    result = plan(_obs(edited, PRE_FIX_LABEL))
    assert result.memory.phase is Phase.STOPPING and result.memory.reason == "SpecChanged"
    assert [a.kind for a in result.actions] == [Kind.DELETE_POD, Kind.EVENT]


def test_an_operator_only_edit_restarts_no_driver_with_the_new_hash() -> None:
    launched = _pipeline()
    label = spec_hash(launched, job_image(launched, IMAGE))
    edited = _pipeline(alerts={"noCommitFloorSeconds": 900}, restartPolicy={"maxRestarts": 7})
    assert plan(_obs(edited, label)).actions == []


def test_status_records_the_hash_the_running_driver_carries() -> None:
    obs = _obs(_pipeline(), PRE_FIX_LABEL)
    status = status_from(plan(obs).memory, obs, {})
    assert status["driverSpecHash"] == PRE_FIX_LABEL
    assert status["driverPod"] == "orders-driver-e1"


class _Kube:
    """The calls a reconcile pass makes for a pipeline whose driver is running."""

    def __init__(self, obj: dict[str, Any], pod: dict[str, Any]) -> None:
        self.obj, self.pod = obj, pod
        self.deleted: list[str] = []
        self.events: list[str] = []

    def get_pipeline(self, namespace: str, name: str) -> dict[str, Any]:
        return self.obj

    def driver_pods(self, namespace: str, pipeline: str) -> list[dict[str, Any]]:
        return [self.pod]

    def patch_status(self, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        self.obj = {**obj, "status": {**(obj.get("status") or {}), **status}}
        return self.obj

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        self.deleted.append(name)

    def event(self, obj: dict[str, Any], reason: str, message: str, warning: bool = False) -> None:
        self.events.append(reason)


def _pass(pipeline: Pipeline, label: str) -> _Kube:
    """One reconcile pass over a Running driver pod labelled ``label``."""
    obj = {
        **copy.deepcopy(DOC),
        "metadata": {**DOC["metadata"], "uid": "u-1", "generation": 2},
        "spec": pipeline.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
        "status": {"phase": "Running", "epoch": 1},
    }
    obj["metadata"]["annotations"] = {"eo.dev/epoch": "1"}
    pod = {
        "metadata": {
            "name": "orders-driver-e1",
            "labels": {
                LABEL_PIPELINE: "orders",
                COMPONENT: "driver",
                LABEL_EPOCH: "1",
                LABEL_SPEC_HASH: label,
            },
            "creationTimestamp": "2026-11-01T00:00:00Z",
        },
        "spec": {"nodeName": "node-1"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    kube = _Kube(obj, pod)
    settings = replace(Settings(), job_image=IMAGE, health_interval=1e12, idle_health_interval=1e12)
    Reconciler(cast(Kube, kube), PipelineMetrics(CollectorRegistry()), settings).reconcile(
        "shop", "orders"
    )
    return kube


def test_a_reconcile_pass_leaves_a_driver_with_the_old_formulas_hash_running() -> None:
    kube = _pass(_pipeline(), PRE_FIX_LABEL)
    assert kube.deleted == [] and "SpecChanged" not in kube.events
    assert kube.obj["status"]["driverSpecHash"] == PRE_FIX_LABEL


def test_a_reconcile_pass_restarts_a_driver_of_an_older_operator_job_image() -> None:
    pipeline = _pipeline()
    kube = _pass(pipeline, spec_hash(pipeline, "registry.example/eo-job:1.4.0"))
    assert kube.deleted == ["orders-driver-e1"] and "SpecChanged" in kube.events
