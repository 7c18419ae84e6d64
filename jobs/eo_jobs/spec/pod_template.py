"""What a user's partial pod template (``spec.driver.podTemplate``) may add to eo's pod.

Users shape their pods (labels, annotations, scheduling, extra volumes, init containers,
sidecars, resources, a tighter security context); eo keeps what exactly-once and the pod's
contract depend on: the driver's command, image and ports, its epoch labels, the spec
ConfigMap and credentials in the environment, the restart policy, the ServiceAccount (its own
field), and the security floor (non-root, read-only root filesystem, no privilege). The same
rules run in ``eo validate`` and in the operator; the CRD checks the labels and annotations.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

OWN_PREFIX = "eo.dev/"
JOB_UID = 10001
"""The job image's user (and group): drivers and executors run as it."""
POD_SECURITY_CONTEXT: Mapping[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": JOB_UID,
    "runAsGroup": JOB_UID,
    "fsGroup": JOB_UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
"""The security floor of a driver or executor pod; a template may only tighten it."""
PLATFORM_UID_FIELDS = ("runAsUser", "runAsGroup", "fsGroup")
"""Left out where the platform assigns them (OpenShift's restricted SCC picks a UID of the
namespace's range and refuses a pod that names another)."""
ASSIGNED_UID_ENV = "EO_PLATFORM_ASSIGNS_UID"
"""``true`` on an OpenShift-like platform (the chart's ``openshift: true``): the operator's
setting, passed to the driver for the executor pods it creates."""


def pod_security_context(platform_assigns_uid: bool = False) -> dict[str, Any]:
    """The pod-level security floor; without a UID, GID or fsGroup if the platform assigns
    them (the job image's entrypoint then names the arbitrary UID through nss_wrapper)."""
    context = copy.deepcopy(dict(POD_SECURITY_CONTEXT))
    if platform_assigns_uid:
        for key in PLATFORM_UID_FIELDS:
            context.pop(key)
    return context


CONTAINER_SECURITY_CONTEXT: Mapping[str, Any] = {
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
"""The security floor of the driver or executor container."""
TMP_VOLUME = "tmp"
"""The writable emptyDir at /tmp of every eo pod (HOME, Python's and the JVM's temporary files);
the root filesystem is read-only."""
ALLOWED_SPEC = frozenset(
    {
        "nodeSelector",
        "tolerations",
        "affinity",
        "topologySpreadConstraints",
        "priorityClassName",
        "imagePullSecrets",
        "volumes",
        "initContainers",
        "containers",
        "securityContext",
        "schedulerName",
        "runtimeClassName",
        "hostAliases",
        "dnsConfig",
        "dnsPolicy",
        "enableServiceLinks",
    }
)
OWNED_SPEC = {
    "restartPolicy": "eo relaunches drivers itself (restartPolicy Never)",
    "serviceAccountName": "set spec.driver.serviceAccount",
    "terminationGracePeriodSeconds": "a driver stops at a batch boundary within eo's grace",
    "hostNetwork": "the driver's ports belong to its Service",
    "hostPID": "not allowed: it would expose every process of the node",
    "hostIPC": "not allowed",
}
MAIN_CONTAINER_FIELDS = frozenset({"name", "env", "envFrom", "volumeMounts", "resources"})
MAIN_CONTAINER_OWNED = {
    "image": "set spec.driver.image",
    "command": "the image's entrypoint runs `eo run --epoch N`",
    "args": "the image's entrypoint runs `eo run --epoch N`",
    "ports": "the driver's ports are fixed (metrics, driver, block manager)",
}
RESERVED_ENV_PREFIXES = ("EO_", "POD_", "SPARK_", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
RESERVED_ENV = frozenset({"HOME", "PYSPARK_PYTHON"})
RESERVED_VOLUMES = frozenset({"tmp", "data"})
WEAKENING = {
    "runAsNonRoot": (False, "pods run as non-root"),
    "runAsUser": (0, "pods run as non-root"),
    "privileged": (True, "no privileged containers"),
    "allowPrivilegeEscalation": (True, "no privilege escalation"),
    "readOnlyRootFilesystem": (False, "the root filesystem stays read-only (write under /tmp)"),
}


def refusals(template: Mapping[str, Any], main: str = "driver") -> list[tuple[str, str]]:
    """(path below podTemplate, reason) for everything the template may not do."""
    found: list[tuple[str, str]] = []
    meta = template.get("metadata") or {}
    for kind in ("labels", "annotations"):
        for key in sorted(meta.get(kind) or {}):
            if key.startswith(OWN_PREFIX):
                found.append((f"metadata.{kind}", f"{key}: {OWN_PREFIX}* keys are eo's own"))
    spec = template.get("spec") or {}
    for key in sorted(spec):
        if key in OWNED_SPEC:
            found.append((f"spec.{key}", f"set by eo: {OWNED_SPEC[key]}"))
        elif key not in ALLOWED_SPEC:
            found.append(
                (
                    f"spec.{key}",
                    f"not supported; a template may set {', '.join(sorted(ALLOWED_SPEC))}",
                )
            )
    found += _security("spec.securityContext", spec.get("securityContext") or {})
    for index, volume in enumerate(spec.get("volumes") or []):
        if isinstance(volume, Mapping) and volume.get("name") in RESERVED_VOLUMES:
            found.append((f"spec.volumes[{index}].name", f"{volume['name']} is eo's volume"))
    for field in ("containers", "initContainers"):
        found += _containers(field, spec.get(field) or [], main if field == "containers" else "")
    return found


def _containers(field: str, containers: Sequence[Any], main: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for index, container in enumerate(containers):
        path = f"spec.{field}[{index}]"
        if not isinstance(container, Mapping) or not container.get("name"):
            found.append((path, "every container needs a name"))
            continue
        if container["name"] == main:
            for key in sorted(container):
                if key in MAIN_CONTAINER_OWNED:
                    found.append((f"{path}.{key}", f"set by eo: {MAIN_CONTAINER_OWNED[key]}"))
                elif key not in MAIN_CONTAINER_FIELDS and key != "securityContext":
                    found.append(
                        (
                            f"{path}.{key}",
                            f"the {main} container takes only env, envFrom, volumeMounts, "
                            "resources and securityContext from a template",
                        )
                    )
            for position, var in enumerate(container.get("env") or []):
                name = var.get("name", "") if isinstance(var, Mapping) else ""
                if name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES):
                    found.append((f"{path}.env[{position}].name", f"{name} is set by eo"))
            for position, mount in enumerate(container.get("volumeMounts") or []):
                if isinstance(mount, Mapping) and mount.get("name") in RESERVED_VOLUMES:
                    found.append(
                        (f"{path}.volumeMounts[{position}]", f"{mount['name']} is eo's mount")
                    )
        found += _security(f"{path}.securityContext", container.get("securityContext") or {})
    return found


def _security(path: str, context: Mapping[str, Any]) -> list[tuple[str, str]]:
    found = [
        (f"{path}.{key}", f"may only tighten: {why}")
        for key, (bad, why) in WEAKENING.items()
        if key in context and context[key] == bad
    ]
    added = (context.get("capabilities") or {}).get("add")
    if added:
        found.append((f"{path}.capabilities.add", "may only tighten: every capability is dropped"))
    return found


def merged(pod: dict[str, Any], template: Mapping[str, Any], main: str) -> dict[str, Any]:
    """``pod`` with a valid ``template`` laid over it (eo's own values win where both set).

    Maps merge, lists append (tolerations, volumes, init containers, sidecars...), and the
    ``main`` container gains the template's env, envFrom, volume mounts, resources and
    security context settings.
    """
    meta = template.get("metadata") or {}
    for kind in ("labels", "annotations"):
        if meta.get(kind):
            pod["metadata"][kind] = {**meta[kind], **pod["metadata"].get(kind, {})}
    spec = pod["spec"]
    for key, value in (template.get("spec") or {}).items():
        if key == "containers":
            _merge_containers(spec["containers"], value, main)
        elif key == "securityContext":
            spec[key] = {**spec.get(key, {}), **value}
        elif isinstance(value, list):
            spec[key] = [*spec.get(key, []), *value]
        elif isinstance(value, Mapping) and isinstance(spec.get(key), Mapping):
            spec[key] = {**value, **spec[key]}
        else:
            spec[key] = value
    return pod


def _merge_containers(ours: list[dict[str, Any]], theirs: Sequence[Any], main: str) -> None:
    own = next(c for c in ours if c["name"] == main)
    for container in theirs:
        if container["name"] != main:
            ours.append(dict(container))
            continue
        for key in ("env", "envFrom", "volumeMounts"):
            if container.get(key):
                own[key] = [*own.get(key, []), *container[key]]
        for key in ("resources", "securityContext"):
            if container.get(key):
                own[key] = _deep_merge(own.get(key, {}), container[key])


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def secure_pod(main: str, platform_assigns_uid: bool = False) -> dict[str, Any]:
    """The security floor of an eo pod whose main container is ``main``: non-root, seccomp,
    read-only root filesystem with an emptyDir at /tmp, no privilege escalation, no
    capabilities. The driver pod is built on it; executor pods get it through the pod template
    Spark merges into each of them (Spark itself sets no security context)."""
    tmp = "/tmp"  # noqa: S108 (an emptyDir of the pod)
    return {
        "metadata": {},
        "spec": {
            "securityContext": pod_security_context(platform_assigns_uid),
            "containers": [
                {
                    "name": main,
                    "securityContext": copy.deepcopy(dict(CONTAINER_SECURITY_CONTEXT)),
                    "volumeMounts": [{"name": TMP_VOLUME, "mountPath": tmp}],
                }
            ],
            "volumes": [{"name": TMP_VOLUME, "emptyDir": {}}],
        },
    }
