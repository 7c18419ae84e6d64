"""The only module that talks to the Kubernetes API.

A small interface over the official client: every other module of the operator receives and
returns plain dicts. Creates are idempotent (409 AlreadyExists means done), deletes of missing
objects are no-ops, and every write to a pipeline (status and the epoch annotation) is
conditional on the resourceVersion of the object it was planned from: a write planned from an
observation that someone else has since changed fails with ``Conflict`` (HTTP 409), so two
operators that both believe they lead can neither flap status nor reserve two epochs from one
observation. The leader-election Lease is read and written here too.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import os
from collections.abc import Callable
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from eo_jobs.spec.models import EPOCH_ANNOTATION, GROUP, PLURAL, VERSION
from eo_operator.resources import LABEL_PIPELINE

log = logging.getLogger("eo.operator")

MERGE_PATCH = "application/merge-patch+json"
"""JSON merge patch: custom resources do not support strategic merge."""


class Conflict(Exception):  # noqa: N818 (a signal, not an error)
    """The object changed since it was read (HTTP 409 on a guarded write)."""


def _count_requests(api_client: client.ApiClient, on_request: Callable[[str, str], None]) -> None:
    """Call ``on_request(method, url)`` for every HTTP request the client sends (the
    operator's API load per pipeline is a scale figure: bench/operator_scale.py)."""
    rest = api_client.rest_client
    send: Callable[..., Any] = rest.request

    def counted(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        on_request(method, url)
        return send(method, url, *args, **kwargs)

    rest.request = counted  # type: ignore[method-assign]


class Kube:
    """Typed, synchronous access to what the operator needs."""

    def __init__(
        self,
        api_client: client.ApiClient | None = None,
        on_request: Callable[[str, str], None] | None = None,
    ) -> None:
        self.api_client = api_client or client.ApiClient()
        if on_request is not None:
            _count_requests(self.api_client, on_request)
        self.core = client.CoreV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.coordination = client.CoordinationV1Api(self.api_client)
        self._secrets_read: dict[tuple[str, str, str], str] = {}
        """(namespace, Secret, key) -> the value last read (``secret_value``)."""

    def _plain(self, obj: Any) -> dict[str, Any]:
        plain = self.api_client.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
        return cast(dict[str, Any], plain)

    def get_pipeline(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pipeline object, or None when it is gone."""
        try:
            found = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name
            )
            return cast(dict[str, Any], found)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def reserve_epoch(self, obj: dict[str, Any], epoch: int) -> dict[str, Any]:
        """Set the epoch annotation, guarded by the object's resourceVersion."""
        meta = obj["metadata"]
        body = {
            "metadata": {
                "resourceVersion": meta["resourceVersion"],
                "annotations": {EPOCH_ANNOTATION: str(epoch)},
            }
        }
        try:
            return cast(
                dict[str, Any],
                self.custom.patch_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    meta["namespace"],
                    PLURAL,
                    meta["name"],
                    body,
                    _content_type=MERGE_PATCH,
                ),
            )
        except ApiException as exc:
            if exc.status == 409:
                raise Conflict(f"{meta['namespace']}/{meta['name']} changed") from exc
            raise

    def remove_annotation(self, obj: dict[str, Any], key: str) -> dict[str, Any] | None:
        """Remove one annotation (not guarded: it only ever undoes a one-shot request, the
        ``eo.dev/adopt-fence`` hand-over); the object after, or None when it is gone."""
        meta = obj["metadata"]
        body = {"metadata": {"annotations": {key: None}}}
        try:
            return cast(
                dict[str, Any],
                self.custom.patch_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    meta["namespace"],
                    PLURAL,
                    meta["name"],
                    body,
                    _content_type=MERGE_PATCH,
                ),
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch_status(self, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any] | None:
        """Merge-patch the status subresource of ``obj``, guarded by its resourceVersion.

        ``obj`` is the object the status was planned from (the observation, or what the
        previous guarded write returned). Returns the updated object (its new resourceVersion
        guards the next write), None when the object is gone; ``Conflict`` when it changed
        since ``obj`` was read: re-observe and plan again, never retry the same write.
        """
        meta = obj["metadata"]
        body = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": status}
        try:
            updated = self.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                meta["namespace"],
                PLURAL,
                meta["name"],
                body,
                _content_type=MERGE_PATCH,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 409:
                raise Conflict(f"{meta['namespace']}/{meta['name']} changed") from exc
            raise
        return cast(dict[str, Any], updated)

    def read_lease(self, namespace: str, name: str, timeout: float) -> dict[str, Any] | None:
        """The Lease, or None when it does not exist."""
        try:
            lease = self.coordination.read_namespaced_lease(
                name, namespace, _request_timeout=timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return self._plain(lease)

    def write_lease(
        self, namespace: str, lease: dict[str, Any], timeout: float
    ) -> dict[str, Any] | None:
        """Create the Lease (no resourceVersion) or replace it (guarded by its resourceVersion).

        Returns the written Lease, or None when another writer got there first (409).
        """
        name = lease["metadata"]["name"]
        try:
            if lease["metadata"].get("resourceVersion"):
                written = self.coordination.replace_namespaced_lease(
                    name, namespace, cast(Any, lease), _request_timeout=timeout
                )
            else:
                written = self.coordination.create_namespaced_lease(
                    namespace, cast(Any, lease), _request_timeout=timeout
                )
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise
        return self._plain(written)

    def driver_pods(self, namespace: str, pipeline: str) -> list[dict[str, Any]]:
        """Every driver pod of the pipeline (normally one)."""
        pods = self.core.list_namespaced_pod(
            namespace,
            label_selector=f"{LABEL_PIPELINE}={pipeline},app.kubernetes.io/component=driver",
        )
        return [self._plain(p) for p in pods.items]

    def get_node(self, name: str) -> dict[str, Any] | None:
        """A Node (cluster-scoped: the chart grants ``get`` on nodes), or None when it is gone."""
        try:
            node = self.core.read_node(name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return self._plain(node)

    def list_nodes(self) -> list[dict[str, Any]]:
        """Every Node (the chart grants ``list`` on nodes): the disruption guard's input."""
        return [self._plain(node) for node in self.core.list_node().items]

    def apply(self, manifest: dict[str, Any]) -> None:
        """Create a Pod, ConfigMap or Service; replace a ConfigMap that exists."""
        kind = manifest["kind"]
        namespace = manifest["metadata"]["namespace"]
        name = manifest["metadata"]["name"]
        creators: dict[str, Callable[..., Any]] = {
            "Pod": self.core.create_namespaced_pod,
            "ConfigMap": self.core.create_namespaced_config_map,
            "Service": self.core.create_namespaced_service,
        }
        create = creators[kind]
        try:
            create(namespace, manifest)
        except ApiException as exc:
            if exc.status != 409:
                raise
            if kind == "ConfigMap":
                patch: dict[str, Any] = {"data": manifest["data"]}
                annotations = manifest["metadata"].get("annotations")
                if annotations:
                    # The spec's generation travels with the spec (``resources.spec_configmap``).
                    patch["metadata"] = {"annotations": annotations}
                self.core.patch_namespaced_config_map(
                    name, namespace, patch, _content_type=MERGE_PATCH
                )

    def config_map_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """A ConfigMap's data, or None when it does not exist."""
        found = self.config_map(namespace, name)
        return None if found is None else found[0]

    def config_map(self, namespace: str, name: str) -> tuple[dict[str, str], dict[str, str]] | None:
        """A ConfigMap's data and annotations, or None when it does not exist."""
        try:
            found = self.core.read_namespaced_config_map(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        meta = found.metadata
        return dict(found.data or {}), dict((meta.annotations if meta else None) or {})

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        """Delete a pod (graceful by default; 0 = force). Missing is fine."""
        try:
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=grace_seconds)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def secret_value(self, namespace: str, name: str, key: str, *, remembered: bool = False) -> str:
        """One key of a Secret, decoded.

        Each value read is remembered by this process. With ``remembered``, a Secret that is
        gone (404) answers with the value last read: a namespace deletion removes the Secrets
        at once, while the pipeline's finalizer still has to fence and resolve its sinks
        with them (operator audit N5). Only the deletion path asks for it.
        """
        try:
            secret = self.core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            kept = self._secrets_read.get((namespace, name, key))
            if remembered and exc.status == 404 and kept is not None:
                log.warning(
                    "Secret %s/%s is gone; using the value of key %s this operator read last",
                    namespace,
                    name,
                    key,
                )
                return kept
            raise
        data = secret.data or {}
        if key not in data:
            raise KeyError(f"Secret {namespace}/{name} has no key {key!r}")
        value = base64.b64decode(data[key]).decode()
        self._secrets_read[(namespace, name, key)] = value
        return value

    def event(self, obj: dict[str, Any], reason: str, message: str, warning: bool = False) -> None:
        """A Kubernetes Event on the pipeline (what `kubectl describe eop` shows), best effort.

        An event is a report, never a step: a namespace being deleted refuses new objects
        (403), and a refused event must not fail the finalizer that keeps the namespace alive,
        nor any other handler. A refused event is logged instead.
        """
        meta = obj["metadata"]
        involved = client.V1ObjectReference(
            api_version=obj["apiVersion"],
            kind=obj["kind"],
            name=meta["name"],
            namespace=meta["namespace"],
            uid=meta["uid"],
            resource_version=meta.get("resourceVersion"),
        )
        self._record(meta["namespace"], involved, reason, message, warning)

    def operator_event(self, reason: str, message: str, warning: bool = False) -> bool:
        """An Event on the operator's own pod ($POD_NAMESPACE/$POD_NAME), best effort: for what
        must outlive the pipeline's namespace (a deletion that let go of its sinks), whose own
        events a namespace being deleted refuses. False when there is no pod to name."""
        namespace, name = os.environ.get("POD_NAMESPACE"), os.environ.get("POD_NAME")
        if not namespace or not name:
            log.warning("event %s not recorded (no POD_NAMESPACE/POD_NAME): %s", reason, message)
            return False
        involved = client.V1ObjectReference(
            api_version="v1", kind="Pod", name=name, namespace=namespace
        )
        return self._record(namespace, involved, reason, message, warning)

    def _record(
        self,
        namespace: str,
        involved: client.V1ObjectReference,
        reason: str,
        message: str,
        warning: bool,
    ) -> bool:
        now = dt.datetime.now(dt.UTC)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{involved.name}.", namespace=namespace),
            involved_object=involved,
            reason=reason,
            message=message[:1024],
            type="Warning" if warning else "Normal",
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            source=client.V1EventSource(component="eo-operator"),
            reporting_component="eo.dev/operator",
            reporting_instance="eo-operator",
        )
        try:
            self.core.create_namespaced_event(namespace, body)
        except ApiException as exc:
            log.warning(
                "event %s on %s/%s not recorded (HTTP %s): %s",
                reason,
                namespace,
                involved.name,
                exc.status,
                message,
            )
            return False
        return True
