"""A driver that dies while the object's spec is refused is relaunched from the last good spec
(issue 32 item 3), on the real control plane.

The real Reconciler against the real API server and PostgreSQL; the process kubelet runs a
stand-in driver that idles until it is stopped. An edit the API server takes but eo refuses
(an ``env`` DSN reference, which only works for local runs) keeps that driver; the driver is
then SIGKILLed (a crash or an OOM kill look the same). Before, the pipeline ended in Failed
(InvalidSpec); now it goes the failure path (counted, backed off, fenced at the next epoch,
in-doubt resolved) and its next driver runs the spec ConfigMap's spec, which stays as it was.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from eo_jobs.pgserver import free_port
from eo_operator.resources import spec_configmap_name
from tests.operator.reconcile_env import NAME, Scene, stand_in

pytestmark = [pytest.mark.slow]

STAND_IN = """#!@PYTHON@
# A driver that idles until it is stopped (SIGTERM ends it) or killed.
import time

print("stand-in driver up", flush=True)
while True:
    time.sleep(1)
"""

LEDGER = {
    "name": "ledger",
    "postgres": {
        "dsn": {"secretKeyRef": {"name": "ledger-db", "key": "dsn"}},
        "table": "public.ledger",
    },
}
REFUSED = {"name": "audit", "postgres": {"dsn": {"env": "AUDIT_DSN"}, "table": "public.a"}}
"""A second sink whose DSN is an env reference: the CRD takes it, the operator refuses it."""


def _apply(scene: Scene, folder: Path, port: int, sinks: list[dict[str, Any]]) -> None:
    env = [{"name": "PATH", "value": f"{folder}{os.pathsep}{os.environ['PATH']}"}]
    scene.apply(
        suspend=False,
        sinks=sinks,
        restartPolicy={"backoffSeconds": 1, "maxRestarts": 5},
        driver={
            "metricsPort": port,
            "podTemplate": {"spec": {"containers": [{"name": "driver", "env": env}]}},
        },
    )


def _status(scene: Scene) -> dict[str, Any]:
    return dict(scene.get().get("status") or {})


def _pass_until(scene: Scene, done: Any, seconds: float, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        status = _status(scene)
        if done(status):
            return status
        assert time.monotonic() < deadline, (what, scene.pods(), status)
        scene.reconcile()
        time.sleep(0.5)


def _live_driver(scene: Scene) -> dict[str, Any] | None:
    pods = scene.reconciler.kube.driver_pods(scene.namespace, NAME)
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return max(live, key=lambda p: int(p["metadata"]["labels"]["eo.dev/epoch"]), default=None)


def _config_map(scene: Scene) -> dict[str, Any]:
    out = scene.cluster.kubectl(
        "get", "configmap", spec_configmap_name(NAME), "-n", scene.namespace, "-o", "json"
    )
    found = json.loads(out.stdout)
    return {
        "data": found["data"],
        "annotations": found["metadata"].get("annotations") or {},
        "resourceVersion": found["metadata"]["resourceVersion"],
    }


def _spec_valid(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "SpecValid")


def test_a_driver_killed_while_the_spec_is_refused_is_relaunched_from_the_last_good_spec(
    reconcile_scene: Scene, tmp_path: Path
) -> None:
    scene = reconcile_scene
    folder, port = stand_in(tmp_path / "stand-in", STAND_IN), free_port()

    # Generation 1 runs with epoch 1.
    _apply(scene, folder, port, [LEDGER])
    _pass_until(scene, lambda s: s.get("phase") == "Running", 90, "generation 1 runs")
    first = _live_driver(scene)
    assert first is not None and first["metadata"]["labels"]["eo.dev/epoch"] == "1"
    good_hash = first["metadata"]["labels"]["eo.dev/spec-hash"]
    config_map = _config_map(scene)
    assert config_map["annotations"].get("eo.dev/generation") == "1"

    # Generation 2 is refused: the driver keeps running, status and an event say why.
    _apply(scene, folder, port, [LEDGER, REFUSED])
    kept = _pass_until(scene, lambda s: s.get("reason") == "InvalidSpec", 30, "the edit refused")
    assert kept["phase"] == "Running" and kept["observedGeneration"] == 2
    assert _live_driver(scene) is not None
    assert _live_driver(scene)["metadata"]["name"] == first["metadata"]["name"]  # type: ignore[index]

    # The driver dies (SIGKILL: a crash, an OOM kill).
    scene.cluster.kubelet_on(first["spec"]["nodeName"]).kill(
        scene.namespace, first["metadata"]["name"], signal.SIGKILL
    )

    def relaunched(status: dict[str, Any]) -> bool:
        pod = _live_driver(scene)
        return (
            pod is not None
            and pod["metadata"]["labels"]["eo.dev/epoch"] == "2"
            and status.get("phase") == "Running"
        )

    status = _pass_until(scene, relaunched, 90, "the driver is relaunched from the last good spec")
    second = _live_driver(scene)
    assert second is not None

    # The normal failure path: counted, the failed pod recorded, fenced at epoch 2 first.
    assert status["restarts"] == 1
    assert status["lastFailure"]["pod"] == first["metadata"]["name"]
    assert scene.annotation() == 2
    assert scene.control().fence_epoch(scene.key) == 2
    assert status.get("recoveredEpoch") == 2

    # ... from the last good spec: generation 1's hash and generation, the ConfigMap as it was.
    assert second["metadata"]["labels"]["eo.dev/spec-hash"] == good_hash
    assert second["metadata"]["annotations"]["eo.dev/generation"] == "1"
    assert (status["driverGeneration"], status["driverSpecHash"]) == (1, good_hash)
    assert _config_map(scene) == config_map

    # Status keeps SpecValid=False with the reason and names the spec that runs; events say so.
    spec_valid = _spec_valid(status)
    assert (spec_valid["status"], spec_valid["reason"]) == ("False", "InvalidSpec")
    assert "spec.sinks[1].postgres.dsn" in spec_valid["message"]
    assert f"the last good spec (generation 1, spec hash {good_hash})" in spec_valid["message"]
    assert status["reason"] == "InvalidSpec"
    assert status["observedGeneration"] == 2
    events = scene.events()
    relaunch = "LastGoodSpec: driver relaunched with epoch 2 from the last good spec"
    assert f"{relaunch} (generation 1, spec hash {good_hash})" in events
    assert "DriverFailed" in events

    # A valid edit (the refused sink taken out again) is a revert to the running spec: the
    # driver is not restarted, and the spec is valid again.
    _apply(scene, folder, port, [LEDGER])
    valid = _pass_until(
        scene, lambda s: _spec_valid(s)["status"] == "True", 30, "the revert is accepted"
    )
    assert valid["reason"] == "Running" and valid["epoch"] == 2
    for _ in range(3):
        scene.reconcile()
    assert _live_driver(scene)["metadata"]["name"] == second["metadata"]["name"]  # type: ignore[index]
