"""A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager) in a folder.

Like controller-runtime's envtest, but with the controller-manager too, so garbage
collection, namespace deletion, service-account tokens and node lifecycle behave as in a
cluster. Authentication is a static token file: one token each for the admin
(``system:masters``), the controller-manager, the scheduler identity the process kubelets bind
pods with, and each node. Authorization is ``Node,RBAC`` so tests meet real denials.

Two nodes: pods go to the first one while it is healthy, the second takes them when the first
is partitioned (and keeps the zone from counting as fully disrupted, in which case the node
lifecycle controller would stop tainting). The node lifecycle controller runs with test
timings: a node silent for ``NODE_MONITOR_GRACE_SECONDS`` is marked Ready=Unknown, its pods
Ready=False, and it is tainted ``node.kubernetes.io/unreachable``, as in a cluster after 50 s.
"""

from __future__ import annotations

import secrets
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes import client

from tests.cluster import pki
from tests.cluster.binaries import ClusterBinaries, find_binaries
from tests.cluster.node import node_manifest
from tests.cluster.processes import ManagedProcess, free_port, wait_until

SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
STARTUP_TIMEOUT = 60.0
NODE_NAMES = ("eo-node", "eo-node-b")
NODE_MONITOR_GRACE_SECONDS = 15
"""``--node-monitor-grace-period`` (50 s by default): how long a node may miss its Lease
renewals (every ``node.LEASE_RENEW_SECONDS``) before it is marked Ready=Unknown."""


@dataclass(frozen=True)
class Identity:
    """A static-token user of the test apiserver."""

    user: str
    groups: tuple[str, ...]
    token: str


def _identity(user: str, *groups: str) -> Identity:
    return Identity(user=user, groups=groups, token=secrets.token_hex(16))


class ControlPlane:
    """Starts, exposes and stops one control plane rooted in ``workdir``."""

    def __init__(
        self,
        workdir: Path,
        node_names: tuple[str, ...] = NODE_NAMES,
        binaries: ClusterBinaries | None = None,
    ) -> None:
        self.workdir = workdir
        self.node_names = node_names
        self.node_name = node_names[0]
        self.binaries = binaries or find_binaries()
        self.admin = _identity("eo-admin", "system:masters")
        self.controller_manager = _identity("system:kube-controller-manager")
        self.scheduler = _identity("system:kube-scheduler")
        self.nodes = {name: _identity(f"system:node:{name}", "system:nodes") for name in node_names}
        self.node = self.nodes[self.node_name]
        self.port = 0
        self.kubeconfig = workdir / "admin.kubeconfig"
        self._processes: list[ManagedProcess] = []
        self._pki: pki.Pki | None = None

    @property
    def server(self) -> str:
        """The apiserver URL."""
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_cert(self) -> Path:
        """The CA that signed the apiserver's serving certificate."""
        assert self._pki is not None, "control plane not started"
        return self._pki.ca_cert

    def start(self) -> None:
        """Start etcd, the apiserver and the controller-manager; return once all are ready."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._pki = pki.generate(self.workdir / "pki")
        try:
            self._start_etcd()
            self._start_apiserver()
            self._start_controller_manager()
            self._register_nodes()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the components, newest first, so none logs errors about a vanished peer."""
        while self._processes:
            self._processes.pop().stop()

    def _launch(self, name: str, argv: list[str]) -> ManagedProcess:
        process = ManagedProcess(name, argv, self.workdir / f"{name}.log")
        self._processes.append(process)
        process.start()
        return process

    def _start_etcd(self) -> None:
        client_port, peer_port = free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
        self.etcd_url = client_url
        etcd = self._launch(
            "etcd",
            [
                str(self.binaries.etcd),
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        wait_until(
            lambda: _http_ok(f"{client_url}/health"),
            timeout=STARTUP_TIMEOUT,
            what="etcd /health",
            watched=[etcd],
        )

    def _start_apiserver(self) -> None:
        assert self._pki is not None
        self.port = free_port()
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(
            "".join(
                f'{i.token},{i.user},{i.user},"{",".join(i.groups)}"\n'
                for i in (self.admin, self.controller_manager, self.scheduler, *self.nodes.values())
            )
        )
        tokens.chmod(0o600)
        apiserver = self._launch(
            "kube-apiserver",
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--tls-cert-file={self._pki.serving_cert}",
                f"--tls-private-key-file={self._pki.serving_key}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={self._pki.service_account_key}",
                f"--service-account-signing-key-file={self._pki.service_account_key}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                # A loopback advertise address cannot back the `kubernetes` Service endpoints;
                # nothing here routes to that Service anyway.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
            ],
        )
        wait_until(
            lambda: self._ready("/readyz", self.port),
            timeout=STARTUP_TIMEOUT,
            what="kube-apiserver /readyz",
            watched=[apiserver],
        )
        self._write_kubeconfig(self.kubeconfig, self.admin.user, self.admin.token)

    def _start_controller_manager(self) -> None:
        assert self._pki is not None
        port = free_port()
        kubeconfig = self.workdir / "kube-controller-manager.kubeconfig"
        self._write_kubeconfig(kubeconfig, "kcm", self.controller_manager.token)
        kcm = self._launch(
            "kube-controller-manager",
            [
                str(self.binaries.kube_controller_manager),
                f"--kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / 'kcm-certs'}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self._pki.service_account_key}",
                f"--root-ca-file={self._pki.ca_cert}",
                "--profiling=false",
                "--node-monitor-period=1s",
                f"--node-monitor-grace-period={NODE_MONITOR_GRACE_SECONDS}s",
            ],
        )
        wait_until(
            lambda: self._ready("/healthz", port, verify=False),
            timeout=STARTUP_TIMEOUT,
            what="kube-controller-manager /healthz",
            watched=[kcm],
        )

    def _register_nodes(self) -> None:
        with self.api() as api:
            for name in self.node_names:
                node = client.V1Node.model_validate(node_manifest(name))
                client.CoreV1Api(api).create_node(node)

    def _ready(self, path: str, port: int, verify: bool = True) -> bool:
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        if not verify:
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        request = urllib.request.Request(
            f"https://127.0.0.1:{port}{path}",
            headers={"Authorization": f"Bearer {self.admin.token}"},
        )
        return _http_ok(request, context)

    def _write_kubeconfig(self, path: Path, user: str, token: str) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "eo-test",
            "clusters": [
                {
                    "name": "eo-test",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_cert)},
                }
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [
                {
                    "name": "eo-test",
                    "context": {"cluster": "eo-test", "user": user, "namespace": "default"},
                }
            ],
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)

    def api(self, token: str | None = None) -> client.ApiClient:
        """A python-kubernetes client; the admin's unless another bearer ``token`` is given."""
        configuration = client.Configuration(
            host=self.server,
            api_key={"BearerToken": token or self.admin.token},
            api_key_prefix={"BearerToken": "Bearer"},
            ssl_ca_cert=str(self.ca_cert),
        )
        return client.ApiClient(configuration)

    def kubectl(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        input: str | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Run the venv's kubectl (admin kubeconfig by default); raise with stderr on failure."""
        kubectl = Path(sys.prefix) / "bin" / "kubectl"
        argv = [
            str(kubectl),
            f"--kubeconfig={kubeconfig or self.kubeconfig}",
            f"--cache-dir={self.workdir / 'kubectl-cache'}",
            *args,
        ]
        result = subprocess.run(
            argv, input=input, capture_output=True, text=True, check=False, timeout=120
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"kubectl {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}"
            )
        return result

    def service_account_token(
        self, namespace: str, name: str, expiration_seconds: int = 3600
    ) -> str:
        """A bound token for a ServiceAccount, from the TokenRequest API."""
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[SERVICE_ACCOUNT_ISSUER], expiration_seconds=expiration_seconds
            )
        )
        with self.api() as api:
            response = client.CoreV1Api(api).create_namespaced_service_account_token(
                name, namespace, request
            )
        assert response.status is not None and response.status.token
        return response.status.token

    def kubeconfig_for_service_account(self, namespace: str, name: str) -> Path:
        """Write a kubeconfig that authenticates as ``namespace/name`` and return its path."""
        path = self.workdir / f"sa-{namespace}-{name}-{time.monotonic_ns()}.kubeconfig"
        user = f"system:serviceaccount:{namespace}:{name}"
        self._write_kubeconfig(path, user, self.service_account_token(namespace, name))
        return path


def _http_ok(request: str | urllib.request.Request, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False
