"""Epochs on the real control plane: an epoch a driver pod was created with is never handed to
a second driver, even when the operator died before recording it and the pod object vanished
while its process ran on."""

from __future__ import annotations

import contextlib
import signal
import time

import pytest

from eo_jobs.protocol.errors import EXIT_FENCED
from tests.operator.cluster_env import Scene

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _driver_epochs(scene: Scene) -> set[str]:
    return {p["metadata"]["labels"]["eo.dev/epoch"] for p in scene.pods()}


def test_a_pod_created_just_before_an_operator_crash_and_then_lost_never_shares_its_epoch(
    scene: Scene,
) -> None:
    operator = scene.operator
    operator.stop()
    scene.add_files(3)
    try:
        # The operator creates driver -e1 and dies before it records anything else.
        operator.start(EO_OPERATOR_FAULT="after-launch")
        scene.apply()
        assert operator.proc is not None
        assert operator.proc.wait(240) == -signal.SIGKILL, operator.output()[-4000:]
        first = scene.until("the epoch 1 driver running", scene.running_driver)
        assert first["metadata"]["labels"]["eo.dev/epoch"] == "1"
        # Its node is partitioned and then removed: the process runs on (a zombie), and the
        # pod object is force-deleted as the pod garbage collector does for a deleted node.
        zombie = scene.cluster.kubelet.detach(scene.namespace, first["metadata"]["name"])
        scene.cluster.kubectl(
            "delete", "pod", first["metadata"]["name"], "-n", scene.namespace,
            "--grace-period=0", "--force",
        )  # fmt: skip
        scene.until("the pod object gone", lambda: not scene.pods())
    finally:
        operator.start()
    try:
        second = scene.until("a new driver running", scene.running_driver)
        assert second["metadata"]["labels"]["eo.dev/epoch"] == "2", _driver_epochs(scene)
        scene.add_files(3)
        scene.until("all records delivered", scene.all_delivered)
        assert zombie.process.wait(180) == EXIT_FENCED, zombie.log_path.read_text()[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            zombie.process.kill()
    time.sleep(3)
    audit = scene.audit()
    assert (audit.duplicates, audit.missing, audit.unexpected, audit.prepared_left) == (0,) * 4
