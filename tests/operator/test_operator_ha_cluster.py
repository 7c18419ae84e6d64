"""Two operator processes under the chart's ServiceAccount and Lease: one leads, one stands by.

The leader is SIGKILLed in the middle of a recovery (after it reserved the epoch and raised
the fence, before it launched the driver). The standby must take the Lease once it expires,
finish that recovery and launch the driver within 30 s, the sink must stay exact, and the
Lease's events must show one leader at a time. And a leader whose Lease another identity
holds ends its process at its next renewal. Real kube-apiserver, Spark drivers, PostgreSQL.
"""

from __future__ import annotations

import itertools
import json
import re
import signal
import time
import urllib.request
from typing import Any

import pytest

from eo_operator.main import EXIT_LEADERSHIP_LOST
from tests.cluster.plugin import KubeCluster
from tests.operator.cluster_env import LEASE, SYSTEM, Operator, Scene, lease_args

pytestmark = [pytest.mark.spark, pytest.mark.slow]

FAST = lease_args(lease=6, renew=4, retry=1)
"""Test timings (the chart's values allow them): a standby takes over 6 s after a crash."""


def _epoch(scene: Scene) -> int:
    return int(scene.get()["metadata"]["annotations"]["eo.dev/epoch"])


def _lease_holder(cluster: KubeCluster) -> str | None:
    out = cluster.kubectl("get", "lease", LEASE, "-n", SYSTEM, "-o", "json", check=False)
    if out.returncode != 0:
        return None
    return (json.loads(out.stdout).get("spec") or {}).get("holderIdentity")


def _holder(scene: Scene) -> str | None:
    return _lease_holder(scene.cluster)


def _lease_events(scene: Scene) -> list[dict[str, Any]]:
    out = scene.cluster.kubectl("get", "events", "-n", SYSTEM, "-o", "json")
    events = [
        e
        for e in json.loads(out.stdout)["items"]
        if e["involvedObject"].get("kind") == "Lease" and e["involvedObject"]["name"] == LEASE
    ]
    return sorted(events, key=lambda e: int(e["metadata"]["resourceVersion"]))


def _started_leading(scene: Scene, operator: Operator) -> None:
    operator.start()
    scene.until(f"{operator.identity} leads", lambda: _holder(scene) == operator.identity, 60)


def _leads(operator: Operator) -> float:
    """The operator's ``eo_operator_leader``, read from its metrics endpoint."""
    url = f"http://127.0.0.1:{operator.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    (value,) = re.findall(r"^eo_operator_leader (\S+)$", text, flags=re.MULTILINE)
    return float(value)


def test_the_standby_finishes_a_recovery_the_killed_leader_started(scene: Scene) -> None:
    leader = scene.operator
    standby = Operator(leader.kubeconfig, leader.log_dir, identity="eo-operator-1", args=FAST)
    leader.stop()
    leader.args = FAST
    try:
        _started_leading(scene, leader)
        standby.start()
        scene.add_files(2)
        scene.apply()
        driver = scene.until("a running driver", scene.running_driver)
        scene.until("first rows", lambda: scene.rows() > 0)
        assert _holder(scene) == leader.identity
        # Both serve metrics; only the leader says it leads (the no-leader alert's input).
        assert (_leads(leader), _leads(standby)) == (1.0, 0.0)
        # The driver dies while no operator runs; the leader comes back (and takes the Lease
        # again) with a fault that SIGKILLs it between the fence and the launch of epoch 2,
        # and the standby comes back beside it.
        standby.stop()
        leader.stop()
        scene.cluster.kubelet.kill(scene.namespace, driver["metadata"]["name"], signal.SIGKILL)
        leader.start(EO_OPERATOR_FAULT="after-fence")
        scene.until("the leader back", lambda: _holder(scene) == leader.identity, 60)
        standby.start()
        assert leader.proc is not None
        assert leader.proc.wait(240) == -signal.SIGKILL, leader.output()[-4000:]
        killed_at = time.monotonic()
        events_before = len(_lease_events(scene))
        assert _epoch(scene) == 2
        assert scene.running_driver() is None
        scene.until(
            "the standby's epoch 2 driver",
            lambda: any(p["metadata"]["labels"].get("eo.dev/epoch") == "2" for p in scene.pods()),
            timeout=60,
        )
        took = time.monotonic() - killed_at
        assert took <= 30, f"the standby launched epoch 2 {took:.1f} s after the leader died"
        assert _holder(scene) == standby.identity
        assert _leads(standby) == 1.0
        assert _epoch(scene) == 2
        scene.until(
            "epoch 2 driver running",
            lambda: (
                (d := scene.running_driver()) is not None
                and d["metadata"]["labels"]["eo.dev/epoch"] == "2"
            ),
        )
        scene.add_files(2)
        scene.until("all records delivered", scene.all_delivered)
        time.sleep(3)
        audit = scene.audit()
        assert (audit.duplicates, audit.missing, audit.prepared_left) == (0, 0, 0)
        assert "Recovered: fenced to epoch 2" in scene.events()
        # One leader at a time: two candidates never won from one state of the Lease. Every
        # acquisition of a Lease that another identity held, or that was released, is the next
        # transition; an identity that takes back the Lease it still holds (restarted before
        # its lease expired) may be elected again at the same transition, never another one.
        elections = [e for e in _lease_events(scene) if e["reason"] == "LeaderElected"]
        won = [
            (int(e["message"].rsplit(" ", 1)[1].rstrip(")")), e["message"].split(" ", 1)[0])
            for e in elections
        ]
        for (before, who_before), (after, who) in itertools.pairwise(won):
            assert after == before + 1 or (after == before and who == who_before), won
        after_kill = [e["message"] for e in _lease_events(scene)[events_before:]]
        assert after_kill == [f"{standby.identity} became leader (lease transition {won[-1][0]})"]
        assert "leadership lost" not in standby.output()
    finally:
        standby.stop()
        leader.args = lease_args()
        leader.start()


def test_an_operator_whose_lease_was_taken_exits_at_its_next_renewal(
    operator: Operator, kube_cluster: KubeCluster
) -> None:
    operator.stop()
    operator.args = FAST
    try:
        operator.start()
        deadline = time.monotonic() + 60
        while _lease_holder(kube_cluster) != operator.identity:
            assert time.monotonic() < deadline, operator.output()[-3000:]
            time.sleep(0.5)
        kube_cluster.kubectl(
            "patch", "lease", LEASE, "-n", SYSTEM, "--type=merge",
            "-p", '{"spec": {"holderIdentity": "an-intruder"}}',
        )  # fmt: skip
        assert operator.proc is not None
        assert operator.proc.wait(15) == EXIT_LEADERSHIP_LOST, operator.output()[-3000:]
        assert "leadership lost (lease eo-operator is held by an-intruder)" in operator.output()
    finally:
        operator.args = lease_args()
        operator.start()
