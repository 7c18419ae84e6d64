"""pytest fixtures: one real control plane + two process kubelets per session, a namespace per
test.

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
from tests.cluster.podapi import can_mount

XDIST_GROUP = "kube-cluster"
MARKER = "cluster: needs the real Kubernetes control plane (scripts/build-cluster-tools.sh)"
NEEDS_MOUNTS = pytest.mark.skipif(
    not can_mount(),
    reason="root only: the pods mount volumes (a claim's host folder, Spark's executor ConfigMap "
    "at /opt/spark/conf) and the process kubelet bind-mounts them in a private mount namespace "
    "(unshare --mount); run ./dev test as root, or the kind suite with Docker",
)
"""For tests whose pods mount volumes: without root the process kubelet fails such a pod with
``UnsupportedVolume`` (as it must: running it without the volume would prove nothing), so
those tests are skipped by name with the reason, not failed."""


@dataclass
class KubeCluster:
    """What a test sees: the admin kubeconfig, clients, kubectl and the process kubelets.

    Pods run on the first node (``kubelet``) while it is healthy; the second one (``spare``)
    takes new pods once the first is partitioned and tainted.
    """

    control_plane: ControlPlane
    kubelets: dict[str, ProcessKubelet]
    startup_seconds: float

    @property
    def kubelet(self) -> ProcessKubelet:
        """The kubelet of the first node, where pods run while it is healthy."""
        return self.kubelets[self.control_plane.node_name]

    @property
    def spare(self) -> ProcessKubelet:
        """The kubelet of the second node."""
        return self.kubelets[self.control_plane.node_names[1]]

    def kubelet_on(self, node_name: str) -> ProcessKubelet:
        """The kubelet of a node (a pod's ``spec.nodeName``)."""
        return self.kubelets[node_name]

    def stop_kubelets(self) -> None:
        """Stop every kubelet and the processes of its pods."""
        for kubelet in self.kubelets.values():
            kubelet.stop()

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
    """Start the control plane and the kubelets; the caller closes the returned clients.

    ``node_env`` is added to every pod's host environment (a node-level setting, such as the
    chaos harness's fault switch)."""
    started = time.monotonic()
    control_plane = ControlPlane(workdir)
    control_plane.start()
    clients: list[client.ApiClient] = []
    kubelets: dict[str, ProcessKubelet] = {}
    try:
        for i, (name, identity) in enumerate(control_plane.nodes.items()):
            node_client = control_plane.api(identity.token)
            scheduler_client = control_plane.api(control_plane.scheduler.token)
            clients += [node_client, scheduler_client]
            credentials = KubeletCredentials(
                server=control_plane.server,
                ca_cert=control_plane.ca_cert,
                node_token=identity.token,
                scheduler_token=control_plane.scheduler.token,
            )
            kubelets[name] = ProcessKubelet(
                node_client,
                scheduler_client,
                name,
                workdir / ("pods" if i == 0 else f"pods-{name}"),
                credentials,
                extra_env=node_env,
            )
            kubelets[name].start()
    except BaseException:
        for kubelet in kubelets.values():
            kubelet.stop()
        control_plane.stop()
        raise
    cluster = KubeCluster(control_plane, kubelets, time.monotonic() - started)
    return cluster, clients


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
    """etcd + kube-apiserver + kube-controller-manager + two process kubelets, for the session."""
    cluster, clients = start_cluster(tmp_path_factory.mktemp("kube-cluster"))
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(cluster.control_plane.stop)
        for api in clients:
            cleanup.enter_context(api)
        cleanup.callback(cluster.stop_kubelets)
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
