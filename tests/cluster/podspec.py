"""Which pod specs the process kubelet can run, with a reason a person can act on otherwise.

The process kubelet runs the first container's ``command`` + ``args`` as a local process:
images are not pulled or run, so every image maps to this checkout's installation (``eo``,
``python`` resolve from the venv). What cannot be honoured that way fails the pod at once
with a clear reason instead of running something subtly different.
"""

from __future__ import annotations

from pathlib import Path

from kubernetes.client import V1Pod, V1Volume

REPO = Path(__file__).resolve().parents[2]
JOB_IMAGE_REPOSITORY = "eo-job"
"""The chart's job image (Dockerfile target ``job``), whatever registry or tag it has."""
JOB_ENTRYPOINT = [str(REPO / "docker" / "entrypoint.sh")]
"""The job image's ENTRYPOINT (``/opt/eo/bin/entrypoint``, under tini) from this checkout: it
starts Spark's executor backend for Spark's ``executor`` argument, ``eo`` for anything else."""


def image_entrypoint(image: str) -> list[str] | None:
    """The ENTRYPOINT of ``image`` when the process kubelet knows it (the job image only).

    Spark creates executor pods with no command (the image's entrypoint runs) and the single
    argument ``executor``; every other pod here names its command.
    """
    name = image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
    return list(JOB_ENTRYPOINT) if name == JOB_IMAGE_REPOSITORY else None


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
    if not container.command and image_entrypoint(container.image or "") is None:
        raise UnsupportedPodError(
            "NoCommand",
            f"container {container.name!r} has no command: images are not run here, so the "
            "process kubelet needs an explicit command (args are appended to it), except for "
            f"the job image ({JOB_IMAGE_REPOSITORY}), whose entrypoint it runs from this checkout",
        )
    for volume in spec.volumes or []:
        kinds = [name for name, value in volume if value is not None and name != "name"]
        # A claim is resolved to its PersistentVolume's host folder when the pod starts
        # (podvolumes), which fails the pod then if that volume has no host folder; configMap
        # and API access volumes are written into the pod's folder and mounted (podapi).
        supported = (["empty_dir"], ["persistent_volume_claim"], ["config_map"])
        if kinds in supported or _is_api_access_volume(volume):
            continue
        raise UnsupportedPodError(
            "UnsupportedVolume",
            f"volume {volume.name!r} is {'/'.join(kinds) or 'empty'}: the process kubelet "
            "supports emptyDir, configMap and persistentVolumeClaim (hostPath/local) volumes only",
        )
    for env in container.env or []:
        source = env.value_from
        if source is not None and (source.resource_field_ref or source.file_key_ref):
            raise UnsupportedPodError(
                "UnsupportedEnv",
                f"env {env.name!r}: only secretKeyRef, configMapKeyRef and fieldRef are "
                "supported in valueFrom",
            )
