"""Stops the operator starts itself are not crashes: a spec edit of a running pipeline, on a
real control plane with a real driver and a real PostgreSQL sink."""

from __future__ import annotations

import json
import time

import pytest

from tests.operator.cluster_env import Scene

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _patch(scene: Scene, spec: dict[str, object]) -> None:
    scene.cluster.kubectl(
        "patch",
        "eop",
        scene.name,
        "-n",
        scene.namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": spec}),
    )


def test_a_spec_edit_restarts_the_driver_at_a_batch_boundary_with_a_new_epoch_uncounted(
    scene: Scene,
) -> None:
    scene.add_files(3)
    scene.apply()
    first = scene.until("a running driver", scene.running_driver)
    assert first["metadata"]["labels"]["eo.dev/epoch"] == "1"
    scene.until("first rows", lambda: scene.rows() > 0)
    _patch(
        scene,
        {"checkpoint": {"location": str(scene.work / "checkpoint"), "triggerIntervalSeconds": 2}},
    )
    scene.until(
        "an epoch 2 driver running",
        lambda: (
            (d := scene.running_driver()) is not None
            and d["metadata"]["labels"]["eo.dev/epoch"] == "2"
        ),
    )
    scene.add_files(2)
    scene.until("all records delivered", scene.all_delivered)
    time.sleep(3)
    audit = scene.audit()
    assert (audit.duplicates, audit.missing, audit.unexpected, audit.prepared_left) == (0,) * 4
    status = scene.status()
    assert status["restarts"] == 0, status
    assert status.get("lastFailure") is None, status
    events = scene.events()
    assert "SpecChanged" in events
    assert "DriverFailed" not in events and "Backoff" not in status.get("phase", "")
