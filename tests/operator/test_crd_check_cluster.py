"""An upgrade that forgot the CRD (operator audit N2), on the real API server: Helm keeps the
CRD an earlier release installed, and the new operator, run under the chart's ServiceAccount,
refuses to start, naming the status fields the old CRD would drop and the command that fixes
it; once the CRD of its version is applied, the same install starts and leads."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from tests.cluster.plugin import KubeCluster
from tests.operator.cluster_env import installed_operator, wait_crd_established

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
CURRENT = REPO / "crds" / "exactlyoncepipelines.eo.dev.yaml"
V0_1_0 = REPO / "crds" / "compat" / "exactlyoncepipelines.eo.dev.v0.1.0.yaml"


def _apply(cluster: KubeCluster, crd: Path) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    wait_crd_established(cluster)


def _status_properties(cluster: KubeCluster) -> set[str]:
    served = json.loads(
        cluster.kubectl("get", "crd", "exactlyoncepipelines.eo.dev", "-o", "json").stdout
    )
    schema = served["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return set(schema["properties"]["status"]["properties"])


def _leading(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as got:
                if "eo_operator_leader 1.0" in got.read().decode():
                    return True
        except OSError:
            pass
        time.sleep(1)
    return False


def test_an_operator_upgraded_without_its_crd_refuses_to_start_until_the_crd_is_applied(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    with installed_operator(kube_cluster, tmp_path) as operator:
        # The cluster keeps an earlier release's CRD (Helm upgrades never touch crds/).
        operator.stop()
        _apply(kube_cluster, V0_1_0)
        try:
            assert "recoveredEpoch" not in _status_properties(kube_cluster)
            operator.start()
            assert operator.proc is not None
            code = operator.proc.wait(90)
            said = operator.output()
            assert code != 0, said
            assert "CustomResourceDefinition exactlyoncepipelines.eo.dev is older" in said, said
            assert "status.recoveredEpoch" in said and "status.lastFailure" in said, said
            assert "kubectl apply --server-side -f charts/eo/crds/" in said, said
        finally:
            _apply(kube_cluster, CURRENT)

        operator.start()
        assert _leading(operator.metrics_port, 90), operator.output()
        assert operator.proc is not None and operator.proc.poll() is None
