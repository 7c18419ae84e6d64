"""The fake node's side of the node lifecycle: registration, status heartbeats and its Lease.

The node lifecycle controller in kube-controller-manager marks a node Ready=Unknown, its pods
Ready=False, and taints it ``node.kubernetes.io/unreachable`` when its Lease in
``kube-node-lease`` is not renewed (the taint eviction controller then deletes the pods whose
tolerations run out). Renewing the Lease (and posting a Ready status) every few seconds keeps
the fake node healthy; stopping it is exactly what a lost node looks like to the control
plane, and the node itself never writes anything else about it: a kubelet that cannot reach
the API server cannot say so.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from kubernetes.client import (
    ApiException,
    CoordinationV1Api,
    CoreV1Api,
    V1Lease,
    V1LeaseSpec,
    V1ObjectMeta,
)

from tests.cluster.podenv import POD_IP
from tests.cluster.podstatus import timestamp

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
LEASE_RENEW_SECONDS = 2.0
"""More often than a real kubelet (10 s), so a busy test machine never misses the test control
plane's short ``--node-monitor-grace-period`` by accident."""
REQUEST_TIMEOUT = 5.0
STATUS_REPORT_SECONDS = 20.0
CAPACITY = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}


def node_manifest(name: str) -> dict[str, Any]:
    """The Node object the control plane registers for the process kubelet."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "eo.dev/process-kubelet": "true",
            },
        },
    }


def _conditions(ready: str, reason: str, message: str) -> list[dict[str, Any]]:
    now = timestamp(datetime.now(UTC))
    healthy = [
        ("MemoryPressure", "KubeletHasSufficientMemory"),
        ("DiskPressure", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "KubeletHasSufficientPID"),
    ]
    conditions = [
        {
            "type": kind,
            "status": "False",
            "reason": why,
            "message": why,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        for kind, why in healthy
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": ready,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
    )
    return conditions


class NodeAgent:
    """Posts the node's status and renews its Lease, with the node's own credentials."""

    def __init__(self, core: CoreV1Api, coordination: CoordinationV1Api, name: str) -> None:
        self._core, self._coordination, self.name = core, coordination, name
        self._next_lease = 0.0
        self._next_status = 0.0

    def heartbeat(self, force: bool = False) -> None:
        """Renew the Lease and post Ready status when due (or now, if ``force``)."""
        now = time.monotonic()
        if force or now >= self._next_status:
            self._post_status("True", "KubeletReady", "process kubelet is posting ready status")
            self._next_status = now + STATUS_REPORT_SECONDS
        if force or now >= self._next_lease:
            self._renew_lease()
            self._next_lease = now + LEASE_RENEW_SECONDS

    def _post_status(self, ready: str, reason: str, message: str) -> None:
        status = {
            "capacity": CAPACITY,
            "allocatable": CAPACITY,
            "addresses": [
                {"type": "InternalIP", "address": POD_IP},
                {"type": "Hostname", "address": self.name},
            ],
            "conditions": _conditions(ready, reason, message),
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "process kubelet",
                "containerRuntimeVersion": "process://",
                "kubeletVersion": "",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
        self._core.patch_node_status(
            self.name,
            {"status": status},
            _content_type="application/strategic-merge-patch+json",
            _request_timeout=REQUEST_TIMEOUT,
        )

    def _renew_lease(self) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = {
            "holderIdentity": self.name,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "renewTime": now,
        }
        try:
            self._coordination.patch_namespaced_lease(
                self.name,
                LEASE_NAMESPACE,
                {"spec": spec},
                _content_type="application/merge-patch+json",
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as error:
            if error.status != 404:
                raise
            self._coordination.create_namespaced_lease(
                LEASE_NAMESPACE,
                V1Lease(
                    metadata=V1ObjectMeta(name=self.name, namespace=LEASE_NAMESPACE),
                    spec=V1LeaseSpec(
                        holder_identity=self.name, lease_duration_seconds=LEASE_DURATION_SECONDS
                    ),
                ),
            )
            self._renew_lease()
