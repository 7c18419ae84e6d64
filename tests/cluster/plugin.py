"""pytest fixtures: one real control plane + process kubelet per session, a namespace per test.

Register with ``pytest_plugins = ["tests.cluster.plugin"]`` in ``tests/conftest.py``. Tests
that use ``kube_cluster`` (directly or through ``kube_namespace``) get the ``cluster``
marker, so ``-m "not cluster"`` skips them on purpose; a missing build never skips them.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess

import pytest
from kubernetes import client

from tests.cluster.controlplane import ControlPlane
from tests.cluster.kubelet import KubeletCredentials, ProcessKubelet

XDIST_GROUP = "kube-cluster"
MARKER = "cluster: needs the real Kubernetes control plane (scripts/build-cluster-tools.sh)"


@dataclass
class KubeCluster:
    """What a test sees: the admin kubeconfig, clients, kubectl and the process kubelet."""

    control_plane: ControlPlane
    kubelet: ProcessKubelet
    startup_seconds: float

    @property
    def kubeconfig(self) -> Path:
        """The admin (``system:masters``) kubeconfig file."""
        return self.control_plane.kubeconfig

    @property
    def node_name(self) -> str:
        """The fake node every pod is bound to."""
        return self.control_plane.node_name

    def api(self, token: str | None = None) -> client.ApiClient:
        """A new python-kubernetes client: admin, or the bearer ``token`` given."""
        return self.control_plane.api(token)

    def kubectl(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        input: str | None = None,
        check: bool = True,
    ) -> CompletedProcess[str]:
        """Run the venv's kubectl against this cluster (admin unless ``kubeconfig``)."""
        return self.control_plane.kubectl(*args, kubeconfig=kubeconfig, input=input, check=check)

    def kubeconfig_for_service_account(self, namespace: str, name: str) -> Path:
        """A kubeconfig acting as the ServiceAccount (token from the TokenRequest API)."""
        return self.control_plane.kubeconfig_for_service_account(namespace, name)

    def service_account_token(self, namespace: str, name: str) -> str:
        """A bound ServiceAccount token, for ``api(token)``."""
        return self.control_plane.service_account_token(namespace, name)


def start_cluster(
    workdir: Path, node_env: dict[str, str] | None = None
) -> tuple[KubeCluster, list[client.ApiClient]]:
    """Start the control plane and the kubelet; the caller closes the returned clients.

    ``node_env`` is added to every pod's host environment (a node-level setting, such as the
    chaos harness's fault switch)."""
    started = time.monotonic()
    control_plane = ControlPlane(workdir)
    control_plane.start()
    node_client = control_plane.api(control_plane.node.token)
    scheduler_client = control_plane.api(control_plane.scheduler.token)
    credentials = KubeletCredentials(
        server=control_plane.server,
        ca_cert=control_plane.ca_cert,
        node_token=control_plane.node.token,
        scheduler_token=control_plane.scheduler.token,
    )
    kubelet = ProcessKubelet(
        node_client,
        scheduler_client,
        control_plane.node_name,
        workdir / "pods",
        credentials,
        extra_env=node_env,
    )
    try:
        kubelet.start()
    except BaseException:
        control_plane.stop()
        raise
    cluster = KubeCluster(control_plane, kubelet, time.monotonic() - started)
    return cluster, [node_client, scheduler_client]


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``cluster`` marker."""
    config.addinivalue_line("markers", MARKER)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that needs the cluster, so it can be selected or deselected.

    The ``xdist_group`` mark sends them all to one pytest-xdist worker under
    ``--dist loadgroup``: one control plane per run instead of one per worker. It must be
    added before xdist reads it, hence ``tryfirst``.
    """
    for item in items:
        if "kube_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.xdist_group(XDIST_GROUP))


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """etcd + kube-apiserver + kube-controller-manager + process kubelet, for the session."""
    cluster, clients = start_cluster(tmp_path_factory.mktemp("kube-cluster"))
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(cluster.control_plane.stop)
        for api in clients:
            cleanup.enter_context(api)
        cleanup.callback(cluster.kubelet.stop)
        yield cluster


@pytest.fixture
def kube_namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    """A fresh namespace (with its default ServiceAccount) for one test; deleted after."""
    name = f"t-{secrets.token_hex(4)}"
    with kube_cluster.api() as api:
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        deadline = time.monotonic() + 30
        while not core.list_namespaced_service_account(
            name, field_selector="metadata.name=default"
        ).items:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no default ServiceAccount in {name} after 30 s")
            time.sleep(0.1)
    try:
        yield name
    finally:
        with kube_cluster.api() as api:
            client.CoreV1Api(api).delete_namespace(name)
