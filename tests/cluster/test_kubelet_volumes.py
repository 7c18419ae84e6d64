"""The process kubelet mounts a bound PersistentVolumeClaim at its mountPath, as a kubelet does.

Real API objects: a hostPath PersistentVolume, a claim the controller-manager's binder binds
to it, a pod that mounts the claim somewhere else than the host folder. The pod's process sees
the folder at mountPath (a private mount namespace); the host does not.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.cluster.plugin import NEEDS_MOUNTS, KubeCluster
from tests.cluster.processes import wait_until
from tests.cluster.test_kubelet import create, pod_manifest, wait_for_phase

pytestmark = NEEDS_MOUNTS


@pytest.fixture
def core(kube_cluster: KubeCluster) -> Iterator[client.CoreV1Api]:
    with kube_cluster.api() as api:
        yield client.CoreV1Api(api)


def _volume_and_claim(cluster: KubeCluster, namespace: str, host: Path, name: str) -> None:
    host.mkdir(parents=True, exist_ok=True)
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"{namespace}-{name}"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "hostPath": {"path": str(host), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": name},
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"kind": "List", "apiVersion": "v1", "items": [pv, pvc]}),
    )


def test_a_claim_is_mounted_at_its_mount_path_for_the_pod_only(
    kube_cluster: KubeCluster, kube_namespace: str, core: client.CoreV1Api, tmp_path: Path
) -> None:
    host = tmp_path / "volume"
    _volume_and_claim(kube_cluster, kube_namespace, host, "data")
    (host / "in.txt").write_text("from the volume\n")
    mount_path = f"/tmp/eo-mount-{uuid.uuid4().hex[:8]}/data"
    script = f"""
        from pathlib import Path
        print(Path({mount_path!r}, "in.txt").read_text(), end="")
        Path({mount_path!r}, "out.txt").write_text("from the pod\\n")
    """
    manifest = pod_manifest(
        "mounted",
        script,
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        container={"volumeMounts": [{"name": "data", "mountPath": mount_path}]},
    )
    create(core, kube_namespace, manifest)
    wait_for_phase(core, kube_namespace, "mounted", "Succeeded")
    assert kube_cluster.kubelet.logs(kube_namespace, "mounted") == "from the volume\n"
    assert (host / "out.txt").read_text() == "from the pod\n"
    assert not Path(mount_path, "in.txt").exists(), "the mount leaked into the host"


def test_a_read_only_mount_refuses_writes(
    kube_cluster: KubeCluster, kube_namespace: str, core: client.CoreV1Api, tmp_path: Path
) -> None:
    host = tmp_path / "volume"
    _volume_and_claim(kube_cluster, kube_namespace, host, "ro")
    mount_path = f"/tmp/eo-mount-{uuid.uuid4().hex[:8]}/ro"
    script = f"""
        from pathlib import Path
        Path({mount_path!r}, "out.txt").write_text("x")
    """
    manifest = pod_manifest(
        "readonly",
        script,
        volumes=[{"name": "ro", "persistentVolumeClaim": {"claimName": "ro"}}],
        container={"volumeMounts": [{"name": "ro", "mountPath": mount_path, "readOnly": True}]},
    )
    create(core, kube_namespace, manifest)
    wait_for_phase(core, kube_namespace, "readonly", "Failed")
    assert "Read-only file system" in kube_cluster.kubelet.logs(kube_namespace, "readonly")
    assert not (host / "out.txt").exists()


def test_a_pod_waits_while_its_claim_is_unbound(
    kube_cluster: KubeCluster, kube_namespace: str, core: client.CoreV1Api
) -> None:
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "nowhere", "namespace": kube_namespace},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    kube_cluster.kubectl("apply", "-f", "-", input=json.dumps(claim))
    manifest = pod_manifest(
        "waiting",
        "print('never')",
        volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "nowhere"}}],
        container={"volumeMounts": [{"name": "d", "mountPath": "/tmp/eo-never"}]},
    )
    create(core, kube_namespace, manifest)

    def waiting_for_the_claim() -> bool:
        pod = core.read_namespaced_pod("waiting", kube_namespace)
        statuses = (pod.status.container_statuses or []) if pod.status else []
        state = statuses[0].state if statuses else None
        return bool(state and state.waiting and "is not bound" in (state.waiting.message or ""))

    wait_until(waiting_for_the_claim, timeout=30, what="the pod to wait for its claim")
    status = core.read_namespaced_pod("waiting", kube_namespace).status
    assert status is not None and status.phase == "Pending"
