"""Which pod specs the process kubelet can run, with a reason a person can act on otherwise.

The process kubelet runs the first container's ``command`` + ``args`` as a local process:
images are not pulled or run, so every image maps to this checkout's installation (``eo``,
``python`` resolve from the venv). What cannot be honoured that way fails the pod at once
with a clear reason instead of running something subtly different.
"""

from __future__ import annotations

from kubernetes.client import V1Pod, V1Volume


class UnsupportedPodError(Exception):
    """The pod asks for something the process kubelet cannot do; the pod is failed."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


# The ServiceAccount admission plugin adds this projected volume to every pod (token, CA,
# namespace). No process reads it at the in-container path, so it is accepted as a no-op.
_API_ACCESS_SOURCES = {"service_account_token", "config_map", "downward_api"}


def _is_api_access_volume(volume: V1Volume) -> bool:
    if volume.projected is None or not volume.name.startswith("kube-api-access-"):
        return False
    for source in volume.projected.sources or []:
        used = {name for name, value in source if value is not None}
        if not used <= _API_ACCESS_SOURCES:
            return False
    return True


def check_supported(pod: V1Pod) -> None:
    """Raise :class:`UnsupportedPodError` unless the process kubelet can run ``pod`` faithfully."""
    spec = pod.spec
    assert spec is not None
    if (spec.restart_policy or "Always") != "Never":
        raise UnsupportedPodError(
            "UnsupportedRestartPolicy",
            f"restartPolicy {spec.restart_policy or 'Always'!r}: the process kubelet never "
            "restarts a process, so only restartPolicy: Never is accepted",
        )
    if spec.init_containers:
        raise UnsupportedPodError(
            "UnsupportedInitContainers", "the process kubelet runs no init containers"
        )
    container = spec.containers[0]
    if not container.command:
        raise UnsupportedPodError(
            "NoCommand",
            f"container {container.name!r} has no command: images are not run here, so the "
            "process kubelet needs an explicit command (args are appended to it)",
        )
    for volume in spec.volumes or []:
        kinds = [name for name, value in volume if value is not None and name != "name"]
        # A claim is resolved to its PersistentVolume's host folder when the pod starts
        # (podvolumes), which fails the pod then if that volume has no host folder.
        if kinds in (["empty_dir"], ["persistent_volume_claim"]) or _is_api_access_volume(volume):
            continue
        raise UnsupportedPodError(
            "UnsupportedVolume",
            f"volume {volume.name!r} is {'/'.join(kinds) or 'empty'}: the process kubelet "
            "supports emptyDir and persistentVolumeClaim (hostPath/local) volumes only",
        )
    for env in container.env or []:
        source = env.value_from
        if source is not None and (source.resource_field_ref or source.file_key_ref):
            raise UnsupportedPodError(
                "UnsupportedEnv",
                f"env {env.name!r}: only secretKeyRef, configMapKeyRef and fieldRef are "
                "supported in valueFrom",
            )
