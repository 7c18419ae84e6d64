"""A failed driver leaves its forensics behind, on the real control plane with the real operator:
the pod stays (restartPolicy.keepFailedPods, default 1) beside the next driver, its termination
message is the tail of its log (FallbackToLogsOnError), and status.lastFailure and the event say
what happened. The runbook's commands for a failed driver find all of it."""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import pytest

from tests.operator.cluster_env import Scene

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _epoch_running(scene: Scene, epoch: int) -> Any:
    def running() -> dict[str, Any] | None:
        pod = scene.running_driver()
        return pod if pod and pod["metadata"]["labels"]["eo.dev/epoch"] == str(epoch) else None

    return scene.until(f"epoch {epoch} driver running", running)


def _pod_names(scene: Scene) -> set[str]:
    return {p["metadata"]["name"] for p in scene.pods()}


def _runbook(scene: Scene, jsonpath: str, *target: str) -> str:
    """``kubectl get <target> -n NS -o jsonpath=...`` as the runbook writes it."""
    found = scene.cluster.kubectl(
        "get", *target, "-n", scene.namespace, "-o", f"jsonpath={jsonpath}"
    )
    return found.stdout


def test_a_failed_driver_is_kept_beside_the_next_one_and_its_last_words_reach_status(
    scene: Scene,
) -> None:
    scene.add_files(3)
    scene.apply()
    first = _epoch_running(scene, 1)["metadata"]["name"]
    scene.until("first rows", lambda: scene.rows() > 0)
    scene.cluster.kubelet.kill(scene.namespace, first, signal.SIGKILL)
    second = _epoch_running(scene, 2)["metadata"]["name"]

    # The runbook: the failed pod from status, then its termination message and state.
    failed = _runbook(scene, "{.status.lastFailure.pod}", "eop", scene.name)
    assert failed == first and first in _pod_names(scene)
    state = json.loads(
        _runbook(scene, "{.status.containerStatuses[0].state.terminated}", "pod", failed)
    )
    assert state["exitCode"] == 137 and state["message"].strip()
    last = scene.status()["lastFailure"]
    assert (last["reason"], last["exitCode"]) == ("Error", 137)
    assert last["message"] == state["message"].strip().splitlines()[-1][:1000]
    assert f"driver {first} exited with code 137 (Error)" in scene.events()
    described = scene.cluster.kubectl("describe", "eop", scene.name, "-n", scene.namespace)
    assert "Last Failure" in described.stdout and first in described.stdout

    # The next failure keeps the newer pod and deletes the older one (keepFailedPods 1).
    scene.add_files(2)
    scene.cluster.kubelet.kill(scene.namespace, second, signal.SIGKILL)
    _epoch_running(scene, 3)
    scene.until("the older failed pod deleted", lambda: first not in _pod_names(scene))
    assert second in _pod_names(scene)
    assert scene.status()["lastFailure"]["pod"] == second

    scene.until("all records delivered", scene.all_delivered)
    time.sleep(3)
    audit = scene.audit()
    assert (audit.duplicates, audit.missing, audit.unexpected, audit.prepared_left) == (0,) * 4
