"""PersistentVolumeClaim volumes for the process kubelet: the claim's host folder at its mountPath.

A real kubelet mounts a bound claim's volume into the container at ``mountPath``. The process
kubelet runs the container as a host process, so it does the same in a private mount namespace
(``unshare --mount``, root only): the bound PersistentVolume's ``hostPath`` (or ``local``)
folder is bind-mounted at ``mountPath`` for that process alone, ``readOnly`` honoured. The
mountPath folder is created on the host if missing (an empty folder: the mount hides it from
nobody else). A claim that is not Bound yet keeps the pod waiting, as the real scheduler and
kubelet do; a volume type with no host folder, ``subPath``, or a non-root kubelet fail the pod
with a reason.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from kubernetes.client import CoreV1Api, V1Pod

from tests.cluster.podenv import EnvNotReadyError
from tests.cluster.podspec import UnsupportedPodError


@dataclass(frozen=True)
class Mount:
    """One claim's host folder and where the container sees it."""

    host_path: str
    mount_path: str
    read_only: bool


_SCRIPT = """set -e
n=$1; shift
while [ "$n" -gt 0 ]; do
  mkdir -p "$2"
  mount --bind "$1" "$2"
  if [ "$3" = ro ]; then mount -o remount,bind,ro "$2"; fi
  shift 3; n=$((n - 1))
done
exec "$@"
"""


def claim_mounts(pod: V1Pod, core: CoreV1Api) -> list[Mount]:
    """The first container's mounts of PersistentVolumeClaim volumes, resolved to host folders."""
    spec, meta = pod.spec, pod.metadata
    assert spec is not None and meta is not None and meta.namespace is not None
    claims = {
        volume.name: volume.persistent_volume_claim.claim_name
        for volume in spec.volumes or []
        if volume.persistent_volume_claim is not None
    }
    mounts = []
    for mount in spec.containers[0].volume_mounts or []:
        if mount.name not in claims:
            continue
        if mount.sub_path or mount.sub_path_expr:
            raise UnsupportedPodError(
                "UnsupportedVolume",
                f"volume mount {mount.name!r} uses subPath: not supported by the process kubelet",
            )
        claim = core.read_namespaced_persistent_volume_claim(claims[mount.name], meta.namespace)
        phase = claim.status.phase if claim.status else None
        bound_to = claim.spec.volume_name if claim.spec else None
        if phase != "Bound" or not bound_to:
            raise EnvNotReadyError(
                f'persistentvolumeclaim "{claims[mount.name]}" is not bound (phase {phase})'
            )
        volume = core.read_persistent_volume(bound_to)
        source = (volume.spec.host_path or volume.spec.local) if volume.spec else None
        if source is None:
            raise UnsupportedPodError(
                "UnsupportedVolume",
                f"persistentvolume {bound_to!r} has no hostPath or local folder: "
                "the process kubelet mounts only host folders",
            )
        read_only = bool(mount.read_only or volume_read_only(pod, mount.name))
        mounts.append(Mount(source.path, mount.mount_path, read_only))
    return mounts


def volume_read_only(pod: V1Pod, name: str) -> bool:
    """The pod-level ``persistentVolumeClaim.readOnly`` of volume ``name``."""
    assert pod.spec is not None
    for volume in pod.spec.volumes or []:
        if volume.name == name and volume.persistent_volume_claim is not None:
            return bool(volume.persistent_volume_claim.read_only)
    return False


def mount_prefix(mounts: list[Mount]) -> list[str]:
    """argv that runs the command after it with ``mounts`` in a private mount namespace.

    Empty when every mount is its own host folder already (nothing to bind).
    """
    needed = [m for m in mounts if os.path.realpath(m.host_path) != os.path.realpath(m.mount_path)]
    if not needed:
        return []
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        raise UnsupportedPodError(
            "UnsupportedVolume",
            f"mounting {needed[0].host_path} at {needed[0].mount_path} needs a private mount "
            "namespace: run the cluster tests as root (with util-linux unshare)",
        )
    args = [str(len(needed))]
    for m in needed:
        args += [m.host_path, m.mount_path, "ro" if m.read_only else "rw"]
    namespace = [unshare, "--mount", "--propagation", "private", "--"]
    return [*namespace, "/bin/sh", "-c", _SCRIPT, "sh", *args]
