"""A sink fence ahead of the operator's epochs (a re-created pipeline, a manual
``eo recover --epoch N``) is jumped over once, with an event; it never stalls the pipeline."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from eo_jobs.pgserver import PgServer
from eo_jobs.protocol.control import ControlStore
from tests.cluster.plugin import KubeCluster
from tests.operator.cluster_env import Operator, Scene, installed_operator, make_scene

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def operator(
    kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
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
    dsn = pg_server.create_database(kube_namespace.replace("-", "_"))
    return make_scene(kube_cluster, operator, kube_namespace, dsn, tmp_path)


def test_a_fence_above_the_operators_epoch_is_jumped_once_with_an_event(scene: Scene) -> None:
    control = ControlStore(scene.dsn)
    control.ensure_schema()
    control.raise_fence(f"{scene.namespace}/{scene.name}", 100)  # `eo recover --epoch 100`
    scene.apply(suspend=True)

    def epoch() -> int:
        return int(scene.get()["metadata"].get("annotations", {}).get("eo.dev/epoch", "0"))

    key = f"{scene.namespace}/{scene.name}"
    scene.until(
        "suspended and fenced with an epoch above the old fence",
        lambda: (
            scene.status().get("phase") == "Suspended"
            and epoch() == 101
            and control.fence_epoch(key) == 101
        ),
        timeout=120,
    )
    assert "FenceAhead" in scene.events()
