"""A driver that cannot start is a counted failure, on the real control plane: the process
kubelet keeps it Pending as a kubelet would (an image it cannot pull, a Secret key that does not
exist), and after restartPolicy.startTimeoutSeconds the real Reconciler deletes it, records the
waiting reason, warns, counts it, and relaunches with a new epoch after the backoff."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.operator.reconcile_env import Scene

pytestmark = [pytest.mark.slow]

TIMEOUT = 30
MISSING_KEY = {
    "podTemplate": {
        "spec": {
            "containers": [
                {
                    "name": "driver",
                    "env": [
                        {
                            "name": "LEDGER_TOKEN",
                            "valueFrom": {"secretKeyRef": {"name": "ledger-db", "key": "token"}},
                        }
                    ],
                }
            ]
        }
    }
}


def _driver(scene: Scene) -> dict[str, Any] | None:
    pods = scene.reconciler.kube.driver_pods(scene.namespace, "orders")
    return pods[0] if len(pods) == 1 else None


def _waiting_reason(pod: dict[str, Any] | None) -> str | None:
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return (
        ((statuses[0].get("state") or {}).get("waiting") or {}).get("reason") if statuses else None
    )


def _start_timeouts(scene: Scene) -> float:
    exposition = scene.reconciler.metrics.exposition().decode()
    prefix = f'eo_pipeline_start_timeouts_total{{namespace="{scene.namespace}",pipeline="orders"}}'
    values = [line.split()[-1] for line in exposition.splitlines() if line.startswith(prefix)]
    return float(values[0]) if values else -1.0


@pytest.mark.parametrize(
    ("driver", "reason", "detail"),
    [
        ({"image": "registry.invalid/eo-job:typo"}, "ImagePullBackOff", "registry.invalid"),
        (MISSING_KEY, "CreateContainerConfigError", "couldn't find key token"),
    ],
    ids=["image-pull", "missing-secret-key"],
)
def test_a_driver_that_never_starts_is_deleted_counted_and_relaunched_with_a_new_epoch(
    reconcile_scene: Scene, driver: dict[str, Any], reason: str, detail: str
) -> None:
    scene = reconcile_scene
    scene.apply(
        suspend=False,
        driver=driver,
        restartPolicy={"startTimeoutSeconds": TIMEOUT, "backoffSeconds": 1},
    )
    deadline = time.monotonic() + 60
    while _waiting_reason(_driver(scene)) != reason:
        assert time.monotonic() < deadline, (_driver(scene), scene.get().get("status"))
        scene.reconcile()
        time.sleep(1)
    first = _driver(scene)
    assert first is not None and first["metadata"]["labels"]["eo.dev/epoch"] == "1"
    assert _start_timeouts(scene) == 0
    assert scene.get()["status"]["phase"] == "Starting"

    deadline = time.monotonic() + TIMEOUT + 30
    while scene.get()["status"].get("reason") != "StartTimeout":
        assert time.monotonic() < deadline, scene.get().get("status")
        scene.reconcile()
        time.sleep(1)
    status = scene.get()["status"]
    failure = status["lastFailure"]
    assert (failure["pod"], failure["reason"]) == (first["metadata"]["name"], reason)
    assert detail in failure["message"] and "exitCode" not in failure
    assert status["restarts"] == 1
    assert f"StartTimeout: driver {first['metadata']['name']} did not start" in scene.events()
    assert _start_timeouts(scene) == 1

    deadline = time.monotonic() + 60
    while (relaunched := _driver(scene)) is None or relaunched["metadata"]["labels"][
        "eo.dev/epoch"
    ] == "1":
        assert time.monotonic() < deadline, (scene.pods(), scene.get().get("status"))
        scene.reconcile()
        time.sleep(1)
    assert relaunched["metadata"]["labels"]["eo.dev/epoch"] == "2"
    assert scene.annotation() == 2
    assert scene.control().fence_epoch(scene.key) == 2
    assert _start_timeouts(scene) == 1
