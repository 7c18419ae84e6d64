"""The environment and argv of a pod's process, resolved the way the kubelet resolves them.

``envFrom`` then ``env`` (later wins); ``valueFrom`` reads Secrets and ConfigMaps with the
node's own credentials, so the Node authorizer decides, as in a cluster; ``$(VAR)``
references in values, command and args expand against the variables defined so far.
A missing required Secret or ConfigMap is not a pod failure: as with the real kubelet the
pod waits (``CreateContainerConfigError``) and is retried.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping

from kubernetes.client import ApiException, CoreV1Api, V1Container, V1EnvVar, V1Pod

POD_IP = "127.0.0.1"
_REFERENCE = re.compile(r"\$(\$|\(([^)]*)\))")
_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


class EnvNotReadyError(Exception):
    """A referenced Secret/ConfigMap (or key) is missing; the container waits and retries."""


def expand(text: str, variables: Mapping[str, str]) -> str:
    """Expand ``$(NAME)`` from ``variables``; ``$$`` is a literal ``$``; unknown refs stay."""

    def replace(match: re.Match[str]) -> str:
        if match.group(1) == "$":
            return "$"
        name = match.group(2)
        return variables.get(name, match.group(0))

    return _REFERENCE.sub(replace, text)


def field_value(pod: V1Pod, path: str) -> str:
    """The value of a downward-API ``fieldRef`` path for ``pod``."""
    meta, spec = pod.metadata, pod.spec
    assert meta is not None and spec is not None
    subscript = _SUBSCRIPT.match(path)
    if subscript is not None:
        values = meta.labels if subscript.group(1) == "labels" else meta.annotations
        return (values or {}).get(subscript.group(2), "")
    simple = {
        "metadata.name": meta.name,
        "metadata.namespace": meta.namespace,
        "metadata.uid": meta.uid,
        "spec.nodeName": spec.node_name,
        "spec.serviceAccountName": spec.service_account_name,
        "status.podIP": POD_IP,
        "status.podIPs": POD_IP,
        "status.hostIP": POD_IP,
        "status.hostIPs": POD_IP,
    }
    if path not in simple:
        raise EnvNotReadyError(f"unsupported fieldRef path {path!r}")
    return simple[path] or ""


def _decode(value: bytes | str) -> str:
    raw = value if isinstance(value, bytes) else base64.b64decode(value)
    return raw.decode()


class _Objects:
    """Reads the Secrets and ConfigMaps a pod references, once per resolution."""

    def __init__(self, core: CoreV1Api, namespace: str) -> None:
        self._core, self._namespace = core, namespace
        self._cache: dict[tuple[str, str], dict[str, str] | None] = {}

    def data(self, kind: str, name: str) -> dict[str, str] | None:
        if (kind, name) not in self._cache:
            self._cache[kind, name] = self._read(kind, name)
        return self._cache[kind, name]

    def _read(self, kind: str, name: str) -> dict[str, str] | None:
        try:
            if kind == "secret":
                secret = self._core.read_namespaced_secret(name, self._namespace)
                return {k: _decode(v) for k, v in (secret.data or {}).items()}
            config_map = self._core.read_namespaced_config_map(name, self._namespace)
            return dict(config_map.data or {})
        except ApiException as error:
            if error.status == 404:
                return None
            message = f"cannot read {kind} {name!r}: {error.status} {error.reason}"
            raise EnvNotReadyError(message) from error

    def value(self, kind: str, name: str, key: str, optional: bool) -> str | None:
        data = self.data(kind, name)
        if data is None:
            if optional:
                return None
            raise EnvNotReadyError(f'{kind} "{name}" not found')
        if key not in data:
            if optional:
                return None
            raise EnvNotReadyError(f"couldn't find key {key} in {kind} {self._namespace}/{name}")
        return data[key]


def container_env(pod: V1Pod, container: V1Container, core: CoreV1Api) -> dict[str, str]:
    """The variables the pod spec defines for ``container`` (not the host's base environment)."""
    assert pod.metadata is not None and pod.metadata.namespace is not None
    objects = _Objects(core, pod.metadata.namespace)
    env: dict[str, str] = {}
    for source in container.env_from or []:
        ref = source.secret_ref or source.config_map_ref
        assert ref is not None and ref.name is not None
        kind = "secret" if source.secret_ref is not None else "configmap"
        data = objects.data(kind, ref.name)
        if data is None and not ref.optional:
            raise EnvNotReadyError(f'{kind} "{ref.name}" not found')
        for key, value in (data or {}).items():
            env[(source.prefix or "") + key] = value
    for var in container.env or []:
        resolved = _env_value(pod, var, objects, env)
        if resolved is not None:
            env[var.name] = resolved
    return env


def _env_value(pod: V1Pod, var: V1EnvVar, objects: _Objects, env: dict[str, str]) -> str | None:
    source = var.value_from
    if source is None:
        return expand(var.value or "", env)
    if source.field_ref is not None:
        return field_value(pod, source.field_ref.field_path)
    if source.secret_key_ref is not None:
        ref = source.secret_key_ref
        return objects.value("secret", ref.name or "", ref.key, bool(ref.optional))
    if source.config_map_key_ref is not None:
        cm_ref = source.config_map_key_ref
        return objects.value("configmap", cm_ref.name or "", cm_ref.key, bool(cm_ref.optional))
    raise EnvNotReadyError("unsupported valueFrom source")


def command_line(container: V1Container, env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args`` with ``$(VAR)`` references expanded."""
    return [expand(part, env) for part in [*(container.command or []), *(container.args or [])]]
