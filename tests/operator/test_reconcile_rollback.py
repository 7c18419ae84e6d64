"""Automatic rollback to the last stable spec (issue 32 item 4), on the real control plane.

The real Reconciler against the real API server and PostgreSQL; the process kubelet runs a
stand-in driver (it idles until stopped, or exits 1 at once when told to), and the test decides
a batch in the real decision log with the driver's epoch, as the driver would, which makes
generation 1 stable. Generation 2 fails at every launch; with
``restartPolicy.rollbackAfterSeconds`` the operator relaunches generation 1's spec (from its
copy of it) once the bound has passed, says RolledBack, and does not try generation 2 again
until the next edit.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from eo_jobs.pgserver import free_port
from eo_operator.resources import spec_configmap_name, stable_configmap_name
from tests.operator.reconcile_env import NAME, Scene, stand_in

pytestmark = [pytest.mark.slow]

BOUND = 60
"""The least rollbackAfterSeconds the CRD takes."""

STAND_IN = """#!@PYTHON@
# A driver that idles until it is stopped (SIGTERM ends it), or fails at once when told to.
import os, sys, time

if os.environ.get("STAND_IN_EXIT"):
    print("stand-in driver: failing on purpose", flush=True)
    sys.exit(1)
print("stand-in driver up", flush=True)
while True:
    time.sleep(1)
"""


def _apply(scene: Scene, folder: Path, port: int, **env: str) -> None:
    variables = [
        {"name": "PATH", "value": f"{folder}{os.pathsep}{os.environ['PATH']}"},
        *({"name": k, "value": v} for k, v in env.items()),
    ]
    scene.apply(
        suspend=False,
        restartPolicy={"backoffSeconds": 1, "maxRestarts": 100, "rollbackAfterSeconds": BOUND},
        driver={
            "metricsPort": port,
            "podTemplate": {"spec": {"containers": [{"name": "driver", "env": variables}]}},
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


def _decide(scene: Scene, batch: int, epoch: int) -> None:
    control = scene.control()
    try:
        control.decide(
            pipeline=scene.key,
            query_id="q",
            batch_id=batch,
            epoch=epoch,
            participants=[],
            source_offsets=None,
            rows_written=0,
            prepare_ms=0.0,
        )
    finally:
        control.close()


def _config_map(scene: Scene, name: str) -> dict[str, Any]:
    out = scene.cluster.kubectl("get", "configmap", name, "-n", scene.namespace, "-o", "json")
    found = json.loads(out.stdout)
    return {"data": found["data"], "annotations": found["metadata"].get("annotations") or {}}


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), None)


def test_a_new_spec_that_never_runs_stable_is_rolled_back_once_until_the_next_edit(
    reconcile_scene: Scene, tmp_path: Path
) -> None:
    scene = reconcile_scene
    scene.reconciler.settings.health_interval = 0.0
    folder, port = stand_in(tmp_path / "stand-in", STAND_IN), free_port()

    # Generation 1 runs and decides a batch: stable, and its spec is copied for a rollback.
    _apply(scene, folder, port, STAND_IN_VERSION="1")
    _pass_until(scene, lambda s: s.get("phase") == "Running", 90, "generation 1 runs")
    first = _live_driver(scene)
    assert first is not None
    hash_1 = first["metadata"]["labels"]["eo.dev/spec-hash"]
    _decide(scene, 0, epoch=1)
    _pass_until(scene, lambda s: "lastStable" in s, 30, "generation 1 is stable")
    stable_copy = _config_map(scene, stable_configmap_name(NAME))
    assert stable_copy["annotations"]["eo.dev/generation"] == "1"
    assert stable_copy["data"] == _config_map(scene, spec_configmap_name(NAME))["data"]

    # Generation 2 fails at every launch; past the bound it is rolled back to generation 1.
    _apply(scene, folder, port, STAND_IN_VERSION="2", STAND_IN_EXIT="1")
    _pass_until(scene, lambda s: s.get("reason") == "DriverFailed", 90, "generation 2 fails")
    launched_2 = _status(scene)["rollout"]
    assert launched_2["generation"] == 2 and launched_2["specHash"] != hash_1

    def back_on_1(status: dict[str, Any]) -> bool:
        pod = _live_driver(scene)
        return (
            "rolledBack" in status
            and status.get("phase") == "Running"
            and pod is not None
            and pod["metadata"]["labels"]["eo.dev/spec-hash"] == hash_1
        )

    status = _pass_until(scene, back_on_1, BOUND + 60, "generation 2 is rolled back")
    rolled = status["rolledBack"]
    assert (rolled["fromGeneration"], rolled["toGeneration"]) == (2, 1)
    assert (rolled["fromSpecHash"], rolled["toSpecHash"]) == (launched_2["specHash"], hash_1)
    rolled_at = rolled["time"]
    condition = _condition(status, "RolledBack")
    assert condition is not None and (condition["status"], condition["reason"]) == (
        "True",
        "RolledBack",
    )
    assert "generation 2" in condition["message"]
    assert status["reason"] == "RolledBack" and status["driverGeneration"] == 1
    assert status["observedGeneration"] == 2
    driver = _live_driver(scene)
    assert driver is not None
    epoch = int(driver["metadata"]["labels"]["eo.dev/epoch"])
    assert scene.control().fence_epoch(scene.key) == epoch == status["epoch"]
    assert driver["metadata"]["annotations"]["eo.dev/generation"] == "1"
    # The spec ConfigMap the driver reads holds generation 1's spec again.
    assert _config_map(scene, spec_configmap_name(NAME)) == stable_copy
    events = scene.events()
    assert "RolledBack: generation 2" in events and "rollbackAfterSeconds 60" in events

    # No flapping: generation 2 is not tried again while the spec stays generation 2.
    until = time.monotonic() + 10
    while time.monotonic() < until:
        scene.reconcile()
        time.sleep(0.5)
    after = _status(scene)
    assert after["rolledBack"]["time"] == rolled_at and after["epoch"] == epoch
    assert _live_driver(scene)["metadata"]["name"] == driver["metadata"]["name"]  # type: ignore[index]
    assert scene.events().count("RolledBack: ") == 1

    # An edit ends it: generation 3 runs, and the condition says the rollback is over.
    _apply(scene, folder, port, STAND_IN_VERSION="3")
    edited = _pass_until(
        scene,
        lambda s: s.get("driverGeneration") == 3 and s.get("phase") == "Running",
        90,
        "generation 3 runs",
    )
    assert "rolledBack" not in edited
    condition = _condition(edited, "RolledBack")
    assert condition is not None and (condition["status"], condition["reason"]) == (
        "False",
        "SpecEdited",
    )
