"""A hung driver is restarted, counted and said so, on the real control plane: the process
kubelet runs a stand-in driver that serves its metrics endpoint with one heartbeat and then
never triggers again (a batch stuck on a lock looks the same from outside); past
restartPolicy.progressTimeoutSeconds the real Reconciler deletes it, records DriverHung in
status, warns, counts it, and relaunches with a higher epoch after raising the fence."""

from __future__ import annotations

import contextlib
import json
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from eo_jobs.pgserver import free_port
from eo_operator.metrics import PipelineMetrics
from eo_operator.reconciler import Reconciler, Settings
from tests.operator.reconcile_env import Scene, stand_in

pytestmark = [pytest.mark.slow]

BOUND = 31
"""The least progressTimeoutSeconds the CRD takes with a 1 s slow-batch threshold and a 0 s
trigger interval (1 + 0 + 30)."""

STAND_IN = """#!@PYTHON@
# A driver's metrics endpoint: one trigger at start, then none (hung, the endpoint still
# answering), or with STAND_IN_TRIGGERING one trigger a second (healthy, until frozen).
import http.server, os, time

start = time.time()
key, port = os.environ["STAND_IN_PIPELINE"], int(os.environ["STAND_IN_PORT"])
triggering = bool(os.environ.get("STAND_IN_TRIGGERING"))


class Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        beat = int(time.time()) if triggering else start
        body = (
            "# TYPE eo_driver_last_trigger_timestamp_seconds gauge\\n"
            + 'eo_driver_last_trigger_timestamp_seconds{pipeline="' + key + '"} '
            + repr(float(beat)) + "\\n"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


for _ in range(1500):  # the previous driver may hold the port until its grace (60 s) ends
    try:
        server = http.server.HTTPServer(("127.0.0.1", port), Metrics)
        break
    except OSError:
        time.sleep(0.1)
print("stand-in driver up at", start, "triggering" if triggering else "hung", flush=True)
server.serve_forever()
"""


def _stand_in(folder: Path) -> Path:
    return stand_in(folder, STAND_IN)


def _driver(scene: Scene) -> dict[str, Any] | None:
    pods = scene.reconciler.kube.driver_pods(scene.namespace, "orders")
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return max(live, key=lambda p: int(p["metadata"]["labels"]["eo.dev/epoch"]), default=None)


def _sample(scene: Scene, name: str) -> float | None:
    labels = {"namespace": scene.namespace, "pipeline": "orders"}
    return scene.reconciler.metrics.registry.get_sample_value(name, labels)


def _pass_until(scene: Scene, done: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, (what, scene.pods(), scene.get().get("status"))
        scene.reconcile()
        time.sleep(1)


def _run_stand_in(scene: Scene, folder: Path, triggering: bool) -> dict[str, Any]:
    """Apply the pipeline with the stand-in driver; returns its pod once Running and heard."""
    scene.reconciler.settings.health_interval = 1.0
    port = free_port()
    env = [
        {"name": "PATH", "value": f"{_stand_in(folder)}{os.pathsep}{os.environ['PATH']}"},
        {"name": "STAND_IN_PIPELINE", "value": scene.key},
        {"name": "STAND_IN_PORT", "value": str(port)},
        {"name": "STAND_IN_TRIGGERING", "value": "1" if triggering else ""},
    ]
    scene.apply(
        suspend=False,
        checkpoint={"location": "/tmp/ckpt", "triggerIntervalSeconds": 0},
        alerts={"maxCheckpointDurationSeconds": 1},
        restartPolicy={"progressTimeoutSeconds": BOUND, "backoffSeconds": 1},
        driver={
            "metricsPort": port,
            "podTemplate": {"spec": {"containers": [{"name": "driver", "env": env}]}},
        },
    )
    # Running, and its endpoint answered: the operator republishes its heartbeat.
    _pass_until(
        scene,
        lambda: (
            scene.get().get("status", {}).get("phase") == "Running"
            and _sample(scene, "eo_pipeline_last_trigger_timestamp_seconds") is not None
        ),
        90,
        "the stand-in driver runs and answers",
    )
    first = _driver(scene)
    assert first is not None and first["metadata"]["labels"]["eo.dev/epoch"] == "1"
    assert _sample(scene, "eo_pipeline_hung_restarts_total") == 0
    return first


def _runs_on_until(scene: Scene, until: float) -> None:
    while time.time() < until:
        scene.reconcile()
        time.sleep(1)
    status = scene.get()["status"]
    assert (status["phase"], status.get("restarts", 0)) == ("Running", 0), status


def _restarted_as_hung(scene: Scene, first: dict[str, Any]) -> None:
    """Status, event and counter say DriverHung; the next driver runs above the fence."""
    _pass_until(
        scene,
        lambda: scene.get()["status"].get("reason") == "DriverHung",
        BOUND + 30,
        "the hung driver is restarted",
    )
    status = scene.get()["status"]
    assert status["restarts"] == 1
    failure = status["lastFailure"]
    assert (failure["pod"], failure["reason"]) == (first["metadata"]["name"], "DriverHung")
    events = scene.events()
    assert f"DriverHung: driver {first['metadata']['name']} (epoch 1) is hung" in events
    assert f"restartPolicy.progressTimeoutSeconds is {BOUND}" in events
    assert "raise restartPolicy.progressTimeoutSeconds" in events
    assert _sample(scene, "eo_pipeline_hung_restarts_total") == 1

    def relaunched() -> bool:
        pod = _driver(scene)
        return pod is not None and pod["metadata"]["labels"]["eo.dev/epoch"] == "2"

    _pass_until(scene, relaunched, 60, "the next driver is launched above the fence")
    assert scene.annotation() == 2
    assert scene.control().fence_epoch(scene.key) == 2
    assert _sample(scene, "eo_pipeline_hung_restarts_total") == 1
    pods = json.loads(
        scene.cluster.kubectl("get", "pods", "-n", scene.namespace, "-o", "json").stdout
    )
    assert first["metadata"]["name"] not in {
        p["metadata"]["name"] for p in pods["items"] if not p["metadata"].get("deletionTimestamp")
    }


def test_a_driver_that_stops_triggering_is_restarted_with_a_higher_epoch_counted_and_said_so(
    reconcile_scene: Scene, tmp_path: Path
) -> None:
    scene = reconcile_scene
    first = _run_stand_in(scene, tmp_path / "stand-in", triggering=False)
    beat = _sample(scene, "eo_pipeline_last_trigger_timestamp_seconds")
    assert beat is not None
    _runs_on_until(scene, beat + BOUND - 11)

    # The operator restarts (a new process, or a new leader): it knows nothing of the driver
    # until its endpoint answers, and then the driver's own heartbeat is the clock, not the
    # restart: the driver is restarted at its bound, not a whole bound after the new operator.
    restarted = time.time()
    scene.reconciler = Reconciler(
        scene.reconciler.kube,
        PipelineMetrics(CollectorRegistry()),
        Settings(job_image="eo-job:test", health_interval=1.0),
    )
    _restarted_as_hung(scene, first)
    hung_at = datetime.fromisoformat(scene.get()["status"]["lastFailureTime"]).timestamp()
    assert hung_at < restarted + BOUND - 6, "the clock started again at the operator restart"


def test_a_frozen_driver_that_stops_answering_is_restarted_too(
    reconcile_scene: Scene, tmp_path: Path
) -> None:
    # SIGSTOP: the process and its endpoint stop; the operator heard it before, so its
    # silence is no progress (a frozen process, not a path the operator never had).
    scene = reconcile_scene
    first = _run_stand_in(scene, tmp_path / "stand-in", triggering=True)
    _runs_on_until(scene, time.time() + 5)  # heartbeats keep it running past any launch grace
    kubelet = scene.cluster.kubelet_on(first["spec"]["nodeName"])
    kubelet.freeze(scene.namespace, first["metadata"]["name"])
    frozen = time.time()
    try:
        _runs_on_until(scene, frozen + BOUND - 11)
        _restarted_as_hung(scene, first)
    finally:
        with contextlib.suppress(KeyError, ProcessLookupError):
            kubelet.thaw(scene.namespace, first["metadata"]["name"])
