"""What a user's partial pod template (``spec.driver.podTemplate``) may add to eo's pod.

Users shape their pods (labels, annotations, scheduling, extra volumes, init containers,
sidecars, resources, a tighter security context); eo keeps what exactly-once and the pod's
contract depend on: the driver's command, image and ports, its epoch labels, the spec
ConfigMap and credentials in the environment, the restart policy, the ServiceAccount (its own
field), and the security floor. The same rules run in ``eo validate`` and in the operator; the
CRD checks the labels and annotations.

The floor holds for every container of the pod, sidecars and init containers included, because
a pipeline is created by people who may not create pods themselves: non-root user and no root
group, seccomp and AppArmor on, no SELinux type, user or role of the template's choosing, no
privilege, no privilege escalation, every capability dropped and none added, masked /proc, only
pod-namespaced sysctls, no host namespaces, host ports, host processes or host paths (volumes
come from an allow-list of types that stay inside the pod or its namespace), and a read-only
root filesystem for the driver or executor container. ``refusals`` names each breach with the
field and the fix; ``merged`` holds the floor by itself too, so a template that got past the
refusals still cannot loosen the pod.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
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
VOLUME_TYPES = frozenset(
    {
        "configMap",
        "secret",
        "emptyDir",
        "ephemeral",
        "projected",
        "persistentVolumeClaim",
        "downwardAPI",
        "csi",
    }
)
"""Volume sources a template may use: the pod's own scratch space, the namespace's objects and
claims, and CSI drivers (the restricted Pod Security Standard's list). Everything else is
refused: hostPath reaches the node's files (``/`` or the container runtime's socket), and nfs,
iscsi, rbd, gitRepo... reach storage or run tools outside what Kubernetes grants the namespace."""
SAFE_PROFILES = frozenset({"RuntimeDefault", "Localhost"})
"""seccomp and AppArmor profile types that keep the filter on (Unconfined turns it off)."""
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.ping_group_range",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_syncookies",
    }
)
"""The sysctls Kubernetes counts as safe: namespaced to the pod, no effect on its node."""
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
"""The older way to name a container's AppArmor profile; kubelets still honour it."""
SIDECAR_SECURITY_CONTEXT: Mapping[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
"""What ``merged`` gives every container a template adds (sidecars and init containers), under
the template's own settings. A sidecar runs an image of the user's choosing as the pod's
non-root user: without this, a setuid binary in it would become root with the runtime's default
capabilities. Its root filesystem may stay writable: that is the container's own."""
_ROOT_GROUP = (
    "may only tighten: no group 0 (root), which opens files the node leaves to the root group, "
    "such as a container runtime socket at 0660"
)
_KEEP_DROPPING = "may only tighten: every capability is dropped"


def _unconfined(profile: Any) -> bool:
    return not isinstance(profile, Mapping) or profile.get("type") not in SAFE_PROFILES


def _root_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value == 0


def _not_object(value: Any) -> bool:
    return not isinstance(value, Mapping)


FLOOR: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    (
        "runAsNonRoot",
        lambda value: value is False,
        "may only tighten: pods run as non-root; leave runAsNonRoot unset or true",
    ),
    (
        "runAsUser",
        _root_id,
        "may only tighten: pods run as non-root; leave runAsUser unset or name a UID other than 0",
    ),
    ("runAsGroup", _root_id, f"{_ROOT_GROUP}; leave runAsGroup unset or name a GID other than 0"),
    ("fsGroup", _root_id, f"{_ROOT_GROUP}; leave fsGroup unset or name a GID other than 0"),
    (
        "supplementalGroups",
        lambda groups: isinstance(groups, list) and any(_root_id(group) for group in groups),
        f"{_ROOT_GROUP}; remove 0 from supplementalGroups",
    ),
    (
        "privileged",
        lambda value: value is True,
        "may only tighten: no privileged containers; leave privileged unset or false",
    ),
    (
        "allowPrivilegeEscalation",
        lambda value: value is True,
        "may only tighten: no privilege escalation (a setuid binary stays unprivileged); "
        "leave allowPrivilegeEscalation unset or false",
    ),
    (
        "readOnlyRootFilesystem",
        lambda value: value is False,
        "may only tighten: the root filesystem stays read-only (write under /tmp or a volume); "
        "leave readOnlyRootFilesystem unset or true",
    ),
    (
        "seccompProfile",
        _unconfined,
        "may only tighten: system calls stay filtered; use type RuntimeDefault or Localhost",
    ),
    (
        "appArmorProfile",
        _unconfined,
        "may only tighten: AppArmor stays on; use type RuntimeDefault or Localhost",
    ),
    ("seLinuxOptions", _not_object, "must be an object; only seLinuxOptions.level may be set"),
    *(
        (
            f"seLinuxOptions.{key}",
            lambda _value: True,
            "not allowed: the SELinux type, user and role are the platform's (a type such as "
            "spc_t runs the container unconfined); remove it, only seLinuxOptions.level may be set",
        )
        for key in ("type", "user", "role")
    ),
    (
        "procMount",
        lambda value: value != "Default",
        "may only tighten: /proc stays masked; leave procMount unset or Default",
    ),
    ("windowsOptions", _not_object, "must be an object"),
    (
        "windowsOptions.hostProcess",
        lambda value: value is True,
        "not allowed: a host process container runs on the node itself; remove it",
    ),
    ("capabilities", _not_object, f"must be an object; {_KEEP_DROPPING}"),
    (
        "capabilities.add",
        bool,
        f"{_KEEP_DROPPING}; remove capabilities.add",
    ),
    (
        "capabilities.drop",
        lambda drop: not isinstance(drop, list) or "ALL" not in drop,
        f"{_KEEP_DROPPING}; the list must contain ALL (or leave capabilities.drop unset: eo "
        "drops ALL)",
    ),
)
"""The security floor, one rule per field of a (pod or container) securityContext: the field's
dotted path, whether a value breaks the floor, and the refusal (why, then the fix). A field
whose parent is absent or not an object is not looked at (the parent's rule names it)."""
_ABSENT = object()


def _at(context: Mapping[str, Any], dotted: str) -> Any:
    value: Any = context
    for key in dotted.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return _ABSENT
        value = value[key]
    return value


def _breaches(context: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(dotted field, reason) for every value of ``context`` below the security floor."""
    found = []
    for dotted, breaks, reason in FLOOR:
        value = _at(context, dotted)
        if value is not _ABSENT and breaks(value):
            found.append((dotted, reason))
    sysctls = context.get("sysctls")
    if sysctls is not None:
        entries = sysctls if isinstance(sysctls, list) else [sysctls]
        names = [entry.get("name") if isinstance(entry, Mapping) else entry for entry in entries]
        unsafe = [str(name) for name in names if name not in SAFE_SYSCTLS]
        if unsafe:
            found.append(
                (
                    "sysctls",
                    f"{', '.join(unsafe)}: only the sysctls Kubernetes counts as safe (namespaced "
                    f"to the pod) may be set: {', '.join(sorted(SAFE_SYSCTLS))}; remove the others",
                )
            )
    return found


def refusals(template: Mapping[str, Any], main: str = "driver") -> list[tuple[str, str]]:
    """(path below podTemplate, reason) for everything the template may not do."""
    found: list[tuple[str, str]] = []
    meta = template.get("metadata") or {}
    for kind in ("labels", "annotations"):
        for key in sorted(meta.get(kind) or {}):
            if key.startswith(OWN_PREFIX):
                found.append((f"metadata.{kind}", f"{key}: {OWN_PREFIX}* keys are eo's own"))
    for key, value in sorted((meta.get("annotations") or {}).items()):
        if key.startswith(APPARMOR_ANNOTATION) and not _confining_annotation(value):
            found.append(
                (
                    "metadata.annotations",
                    f"{key}: may only tighten: AppArmor stays on; use runtime/default or "
                    "localhost/<profile>, or set appArmorProfile in the container's "
                    "securityContext instead",
                )
            )
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
    if "securityContext" in spec:
        found += _security("spec.securityContext", spec["securityContext"])
    found += _volumes(spec.get("volumes") or [])
    for field in ("containers", "initContainers"):
        found += _containers(field, spec.get(field) or [], main if field == "containers" else "")
    return found


def _confining_annotation(profile: Any) -> bool:
    return profile == "runtime/default" or (
        isinstance(profile, str) and profile.startswith("localhost/")
    )


def _volumes(volumes: Sequence[Any]) -> list[tuple[str, str]]:
    """Volumes of a type outside ``VOLUME_TYPES``, and eo's own names."""
    found: list[tuple[str, str]] = []
    allowed = ", ".join(sorted(VOLUME_TYPES))
    for index, volume in enumerate(volumes):
        path = f"spec.volumes[{index}]"
        if not isinstance(volume, Mapping):
            found.append((path, "every volume is an object with a name and one source"))
            continue
        if volume.get("name") in RESERVED_VOLUMES:
            found.append((f"{path}.name", f"{volume['name']} is eo's volume"))
        for kind in sorted(key for key in volume if key != "name" and key not in VOLUME_TYPES):
            found.append(
                (
                    f"{path}.{kind}",
                    f"{kind} volumes are not allowed: a template's volumes stay inside the pod or "
                    "its namespace (a hostPath reaches the node's files, an nfs or iscsi volume "
                    "storage no one granted the namespace); use one of "
                    f"{allowed} (network storage through a PersistentVolume and its claim)",
                )
            )
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
        else:
            for position, port in enumerate(container.get("ports") or []):
                if isinstance(port, Mapping) and port.get("hostPort"):
                    found.append(
                        (
                            f"{path}.ports[{position}].hostPort",
                            "not allowed: a hostPort opens the port on the node; remove it and "
                            "reach the container on the pod's IP or through a Service",
                        )
                    )
        if "securityContext" in container:
            found += _security(f"{path}.securityContext", container["securityContext"])
    return found


def _security(path: str, context: Any) -> list[tuple[str, str]]:
    if context is None:
        return []
    if not isinstance(context, Mapping):
        return [(path, "must be an object (a Kubernetes SecurityContext)")]
    return [(f"{path}.{dotted}", reason) for dotted, reason in _breaches(context)]


def merged(pod: dict[str, Any], template: Mapping[str, Any], main: str) -> dict[str, Any]:
    """``pod`` with a valid ``template`` laid over it (eo's own values win where both set).

    Maps merge, lists append (tolerations, volumes, init containers, sidecars...), and the
    ``main`` container gains the template's env, envFrom, volume mounts, resources and
    security context settings. Every security context comes out at or above the floor: the
    pod's and the main container's keep eo's values wherever the template's would break it, and
    each container the template adds gets ``SIDECAR_SECURITY_CONTEXT`` under its own. eo
    refuses such templates before merging; this holds the floor should one get through anyway.
    """
    meta = template.get("metadata") or {}
    for kind in ("labels", "annotations"):
        if meta.get(kind):
            pod["metadata"][kind] = {**meta[kind], **pod["metadata"].get(kind, {})}
    spec = pod["spec"]
    for key, value in (template.get("spec") or {}).items():
        if key == "containers":
            _merge_containers(spec["containers"], value, main)
        elif key == "initContainers":
            spec[key] = [*spec.get(key, []), *(_sidecar(c) for c in value)]
        elif key == "securityContext":
            ours = spec.get(key, {})
            theirs = value if isinstance(value, Mapping) else {}
            spec[key] = _floored({**ours, **theirs}, ours)
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
            ours.append(_sidecar(container))
            continue
        for key in ("env", "envFrom", "volumeMounts"):
            if container.get(key):
                own[key] = [*own.get(key, []), *container[key]]
        if container.get("resources"):
            own["resources"] = _deep_merge(own.get("resources", {}), container["resources"])
        if isinstance(container.get("securityContext"), Mapping):
            floor = own.get("securityContext", {})
            own["securityContext"] = _floored(
                _deep_merge(floor, container["securityContext"]), floor
            )


def _sidecar(container: Mapping[str, Any]) -> dict[str, Any]:
    """A container the template adds, with the container floor under its security context."""
    return {
        **container,
        "securityContext": _floored(container.get("securityContext"), SIDECAR_SECURITY_CONTEXT),
    }


def _floored(context: Any, floor: Mapping[str, Any]) -> dict[str, Any]:
    """``context`` without any value that breaks the floor, laid over ``floor`` (eo's values):
    what the template tightens stays, what it would loosen falls back to eo's."""
    kept = dict(context) if isinstance(context, Mapping) else {}
    for dotted, _reason in _breaches(kept):
        kept = _without(kept, dotted)
    return _deep_merge(floor, kept)


def _without(context: Mapping[str, Any], dotted: str) -> dict[str, Any]:
    """``context`` less the field at ``dotted``, and less any object that leaves empty."""
    head, _, rest = dotted.partition(".")
    out = dict(context)
    if not rest:
        out.pop(head, None)
    elif isinstance(out.get(head), Mapping):
        out[head] = _without(out[head], rest)
        if not out[head]:
            del out[head]
    return out


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
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
