"""Fixtures of the operator's cluster tests: the CRD installed, a running operator, a scene."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from eo_jobs.pgserver import PgServer
from tests.cluster.plugin import KubeCluster
from tests.operator.cluster_env import (
    Operator,
    Scene,
    installed_operator,
    make_scene,
    wait_crd_established,
)
from tests.operator.reconcile_env import reconcile_scene  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def crd_installed(kube_cluster: KubeCluster) -> KubeCluster:
    """The generated CRD, applied server-side and established."""
    root = Path(__file__).resolve().parents[2]
    kube_cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        str(root / "crds" / "exactlyoncepipelines.eo.dev.yaml"),
    )
    wait_crd_established(kube_cluster)
    return kube_cluster


@pytest.fixture(scope="module")
def operator(
    kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    """The chart installed and the operator running under its ServiceAccount (per module)."""
    with installed_operator(kube_cluster, tmp_path_factory.mktemp("operator")) as running:
        yield running


@pytest.fixture
def scene(
    kube_cluster: KubeCluster,
    operator: Operator,
    kube_namespace: str,
    pg_server: PgServer,
    tmp_path: Path,
) -> Scene:
    """One pipeline's namespace, database, Secret and input folder."""
    dsn = pg_server.create_database(kube_namespace.replace("-", "_"))
    return make_scene(kube_cluster, operator, kube_namespace, dsn, tmp_path)
