"""What a pod's process needs to call the API server as its ServiceAccount, and configMap volumes.

A Spark driver with executors creates its executor pods through the API server, as the pod's
ServiceAccount, which is how the chart's driver Role gets tested. A real kubelet gives every
pod that: the ``KUBERNETES_SERVICE_HOST``/``PORT`` variables and the ``kube-api-access-*``
projected volume (a bound ServiceAccount token, the cluster CA from the ``kube-root-ca.crt``
ConfigMap, the namespace) at ``/var/run/secrets/kubernetes.io/serviceaccount``, where clients
such as fabric8 (Spark's) look for in-cluster credentials. Executor pods also mount a
configMap volume (Spark's configuration folder).

The process kubelet writes these volumes into the pod's folder and bind-mounts them at their
mountPath in the process's private mount namespace (``podvolumes``): root only. A non-root
kubelet cannot mount, so it keeps the projected volume as a no-op (pods that never call the
API run as before) and fails pods that mount a configMap.

There is no service proxy here, so ``KUBERNETES_SERVICE_HOST``/``PORT`` are the API server's
own address rather than the ``kubernetes`` Service's cluster IP.
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

from kubernetes.client import (
    ApiException,
    AuthenticationV1TokenRequest,
    CoreV1Api,
    V1BoundObjectReference,
    V1Pod,
    V1TokenRequestSpec,
    V1Volume,
)

from tests.cluster.podenv import EnvNotReadyError, field_value
from tests.cluster.podspec import UnsupportedPodError
from tests.cluster.podvolumes import Mount

DEFAULT_TOKEN_SECONDS = 3607
"""What the ServiceAccount admission plugin puts in kube-api-access-* volumes."""


def api_env(server: str) -> dict[str, str]:
    """The variables a real kubelet sets for the ``kubernetes`` Service, for ``server``."""
    url = urllib.parse.urlsplit(server)
    host, port = url.hostname or "127.0.0.1", str(url.port or 443)
    return {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": port,
        "KUBERNETES_SERVICE_PORT_HTTPS": port,
        "KUBERNETES_PORT": f"tcp://{host}:{port}",
    }


def can_mount() -> bool:
    """Whether this kubelet can bind-mount folders into a pod's process (root only)."""
    return os.geteuid() == 0


def volume_mounts(pod: V1Pod, core: CoreV1Api, folder: Path) -> list[Mount]:
    """The first container's projected and configMap volumes, written under ``folder``.

    Raises ``EnvNotReadyError`` (the pod waits, as with a real kubelet) while a referenced
    ConfigMap is missing, ``UnsupportedPodError`` for a configMap volume without root.
    """
    spec = pod.spec
    assert spec is not None
    volumes = {v.name: v for v in spec.volumes or [] if v.projected or v.config_map}
    mounts = []
    for mount in spec.containers[0].volume_mounts or []:
        volume = volumes.get(mount.name)
        if volume is None:
            continue
        if not can_mount():
            if volume.config_map is None:
                continue  # the API access volume, unused by pods that never call the API
            raise UnsupportedPodError(
                "UnsupportedVolume",
                f"configMap volume {volume.name!r} must be mounted: run the cluster tests as root",
            )
        files = _files(pod, core, volume)
        target = folder / "volumes" / volume.name
        target.mkdir(parents=True, exist_ok=True)
        for relative, text in files.items():
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            path.chmod(0o644)
        mounts.append(Mount(str(target), mount.mount_path, bool(mount.read_only)))
    return mounts


def _files(pod: V1Pod, core: CoreV1Api, volume: V1Volume) -> dict[str, str]:
    meta = pod.metadata
    assert meta is not None and meta.namespace is not None
    if volume.config_map is not None:
        source = volume.config_map
        data = _config_map(core, meta.namespace, source.name or "", bool(source.optional))
        if source.items:
            return {item.path: data[item.key] for item in source.items if item.key in data}
        return data
    assert volume.projected is not None
    files: dict[str, str] = {}
    for projection in volume.projected.sources or []:
        if projection.service_account_token is not None:
            token = projection.service_account_token
            files[token.path] = _token(pod, core, token.audience, token.expiration_seconds)
        elif projection.config_map is not None:
            cm = projection.config_map
            data = _config_map(core, meta.namespace, cm.name or "", bool(cm.optional))
            pairs = [(i.key, i.path) for i in cm.items] if cm.items else [(k, k) for k in data]
            for key, path in pairs:
                if key in data:
                    files[path] = data[key]
        elif projection.downward_api is not None:
            for field in projection.downward_api.items or []:
                if field.field_ref is not None:
                    files[field.path] = field_value(pod, field.field_ref.field_path)
        else:
            raise UnsupportedPodError(
                "UnsupportedVolume",
                f"projected volume {volume.name!r}: only serviceAccountToken, configMap and "
                "downwardAPI sources are supported",
            )
    return files


def _config_map(core: CoreV1Api, namespace: str, name: str, optional: bool) -> dict[str, str]:
    try:
        return dict(core.read_namespaced_config_map(name, namespace).data or {})
    except ApiException as error:
        if error.status == 404 and optional:
            return {}
        if error.status == 404:
            raise EnvNotReadyError(f'configmap "{name}" not found') from error
        raise EnvNotReadyError(f"cannot read configmap {name!r}: {error.status}") from error


def _token(pod: V1Pod, core: CoreV1Api, audience: str | None, seconds: int | None) -> str:
    """A token bound to the pod (invalid once the pod is gone), as the kubelet requests it."""
    meta, spec = pod.metadata, pod.spec
    assert meta is not None and spec is not None and meta.namespace is not None
    request = AuthenticationV1TokenRequest(
        spec=V1TokenRequestSpec(
            audiences=[audience] if audience else [],
            expiration_seconds=seconds or DEFAULT_TOKEN_SECONDS,
            bound_object_ref=V1BoundObjectReference(
                api_version="v1", kind="Pod", name=meta.name, uid=meta.uid
            ),
        )
    )
    account = spec.service_account_name or "default"
    try:
        response = core.create_namespaced_service_account_token(account, meta.namespace, request)
    except ApiException as error:
        message = f"cannot get a token for serviceaccount {account!r}: {error.status}"
        raise EnvNotReadyError(message) from error
    assert response.status is not None and response.status.token
    return response.status.token
