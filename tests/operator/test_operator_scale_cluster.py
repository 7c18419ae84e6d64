"""200 pipelines on one operator, on the real control plane (issue 11 item 1, review B2).

A sync kopf daemon per pipeline held one thread of kopf's executor (min(32, cores + 4)
threads) for the pipeline's whole life: past that many pipelines, new ones were never
reconciled, and deletions queued behind the daemons forever. Here 200 pipelines, far above
that on any CI machine, each reach their phase, and deleting any of them finishes in 30 s.

Most pipelines are suspended (a recovery, then idle passes); some run a stand-in driver (the
process kubelet finds ``eo`` on the pod's ``PATH``, which the pod template may set, so the
stand-in is a shell script that sleeps: a Running driver pod without a JVM); one runs a real
Spark driver and must stay exact.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.plugin import KubeCluster
from tests.operator.cluster_env import (
    Operator,
    Scene,
    installed_operator,
    lease_args,
    pipeline_yaml,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SUSPENDED = 189
STAND_INS = 10
"""Plus the scene's real driver: 200 pipelines."""
DELETE_WITHIN = 30.0


@pytest.fixture(scope="module")
def operator(
    kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    """The operator with the chart's arguments, but a lease that survives a loaded 2-core CI
    machine: 200 pipelines arriving at once slow the API server down, and a renewal that times
    out would end the operator (the chart restarts its pod; nothing restarts it here)."""
    with installed_operator(kube_cluster, tmp_path_factory.mktemp("operator")) as running:
        running.stop()
        running.args = lease_args(lease=90, renew=60, retry=5)
        running.start()
        yield running


def stand_in_driver(folder: Path) -> Path:
    """A folder with an ``eo`` that only sleeps (it exits at once on SIGTERM)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "eo"
    script.write_text("#!/bin/sh\nexec sleep 3600\n")
    script.chmod(0o755)
    return folder


def manifest(scene: Scene, name: str, *, suspend: bool, path: Path | None) -> dict[str, Any]:
    """A pipeline like the scene's (same Secret and sink), under another name."""
    doc: dict[str, Any] = json.loads(pipeline_yaml(scene))
    doc["metadata"]["name"] = name
    spec = doc["spec"]
    spec["checkpoint"]["location"] = str(scene.work / "checkpoints" / name)
    spec["suspend"] = suspend
    if path is not None:
        env = [{"name": "PATH", "value": f"{path}{os.pathsep}{os.environ['PATH']}"}]
        spec["driver"]["podTemplate"] = {"spec": {"containers": [{"name": "driver", "env": env}]}}
    return doc


def phases(scene: Scene) -> dict[str, str | None]:
    """Every pipeline of the namespace and its phase (None before the first status)."""
    out = scene.cluster.kubectl("get", "eop", "-n", scene.namespace, "-o", "json")
    return {
        item["metadata"]["name"]: (item.get("status") or {}).get("phase")
        for item in json.loads(out.stdout)["items"]
    }


def observed_ages(scene: Scene) -> dict[str, float]:
    """Per pipeline: seconds since a reconcile pass last observed it (operator metrics)."""
    url = f"http://127.0.0.1:{scene.operator.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    now = time.time()
    return {
        sample.labels["pipeline"]: now - sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "eo_pipeline_last_observed_timestamp_seconds"
        for sample in family.samples
        if sample.labels.get("namespace") == scene.namespace
    }


def delete_seconds(scene: Scene, name: str) -> float:
    """Delete a pipeline as a user does; seconds until the object is gone (finalizer done)."""
    started = time.monotonic()
    scene.cluster.kubectl("delete", "eop", name, "-n", scene.namespace, "--wait=false")
    while time.monotonic() - started < 120:
        shown = scene.cluster.kubectl(
            "get", "eop", name, "-n", scene.namespace, "--ignore-not-found", "-o", "name"
        )
        if not shown.stdout.strip():
            return time.monotonic() - started
        time.sleep(0.5)
    raise AssertionError(f"{name} still exists after 120 s\n{scene.operator.output()[-4000:]}")


def test_200_pipelines_each_reach_their_phase_and_any_deletes_within_30s(
    scene: Scene, tmp_path: Path
) -> None:
    stand_in = stand_in_driver(tmp_path / "stand-in")
    expected = {"orders": "Running"}
    docs = []
    for i in range(SUSPENDED):
        docs.append(manifest(scene, f"idle-{i:03d}", suspend=True, path=None))
        expected[f"idle-{i:03d}"] = "Suspended"
    for i in range(STAND_INS):
        docs.append(manifest(scene, f"busy-{i:02d}", suspend=False, path=stand_in))
        expected[f"busy-{i:02d}"] = "Running"
    scene.add_files(4)
    scene.apply()
    bulk = {"apiVersion": "v1", "kind": "List", "items": docs}
    scene.cluster.kubectl("apply", "-f", "-", input=json.dumps(bulk))
    assert len(expected) == 200

    deadline = time.monotonic() + 420
    while True:
        with_phase = phases(scene)
        wrong = {n: with_phase.get(n) for n, p in expected.items() if with_phase.get(n) != p}
        if not wrong:
            break
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{len(wrong)} of 200 pipelines not in their phase: "
                f"{dict(list(wrong.items())[:10])}\n{scene.operator.output()[-6000:]}"
            )
        time.sleep(3)

    scene.until("all records delivered", scene.all_delivered, timeout=300)
    audit = scene.audit()
    assert (audit.duplicates, audit.missing, audit.prepared_left) == (0, 0, 0)

    # Every pipeline is observed again and again, not only once (max requeue 20 s).
    time.sleep(25)
    ages = observed_ages(scene)
    assert set(ages) == set(expected)
    p95 = statistics.quantiles(ages.values(), n=20)[-1]
    assert max(ages.values()) < 60, f"stale pipelines: p95 {p95:.1f} s, max {max(ages.values())}"

    took = {name: delete_seconds(scene, name) for name in ("idle-042", "busy-03", "orders")}
    assert all(seconds < DELETE_WITHIN for seconds in took.values()), took
    left = phases(scene)
    assert len(left) == 197 and "orders" not in left
    assert {name: left[name] for name in left} == {name: expected[name] for name in left}
