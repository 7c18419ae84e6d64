"""What ``eo validate`` checks beyond the schema, for where the pipeline will run.

A pipeline is meant either for Kubernetes (``kubectl apply``; the operator runs it) or for a
local ``eo run``. On Kubernetes, credentials come from Secrets (``env`` references name
variables of the user's shell, which no pod has) and the checkpoint must outlive the driver
pod: on the driver's PersistentVolumeClaim or in an object store. The operator refuses the
first later (``InvalidSpec``); the second it cannot see, and the pipeline would fail with a
lost checkpoint at its first relaunch.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from typing import Literal

from eo_jobs.spec import sql
from eo_jobs.spec.documents import SpecProblem
from eo_jobs.spec.models import API_VERSION, CredentialRef, Driver, Pipeline, PipelineSpec

Target = Literal["kubernetes", "local"]
TARGETS: tuple[Target, ...] = ("kubernetes", "local")
SCRATCH_VOLUMES = frozenset(
    {"emptyDir", "ephemeral", "configMap", "secret", "downwardAPI", "projected"}
)
"""Pod volume sources whose content does not outlive the pod (or is read-only)."""
DRIVER_CONTAINER = "driver"


def check(pipeline: Pipeline, target: Target) -> list[SpecProblem]:
    """Every problem of a schema-valid pipeline meant for ``target``."""
    found = sql.problems(pipeline.spec)
    if target == "kubernetes":
        found += kubernetes_problems(pipeline)
    return found


def kubernetes_problems(pipeline: Pipeline) -> list[SpecProblem]:
    """What ``kubectl apply`` or the operator would refuse, or the cluster would lose."""
    found: list[SpecProblem] = []
    if "api_version" not in pipeline.model_fields_set:
        found.append(
            SpecProblem("apiVersion", f"required by kubectl: add apiVersion: {API_VERSION}")
        )
    found += [
        SpecProblem(
            f"{path}.env",
            "env references only work for local runs (eo run); on Kubernetes use secretKeyRef: "
            "{name: SECRET, key: KEY} (or validate with --for local)",
        )
        for path, ref in credential_refs(pipeline.spec)
        if ref.env is not None
    ]
    problem = checkpoint_problem(pipeline.spec)
    if problem:
        found.append(SpecProblem("spec.checkpoint.location", problem))
    return found


def credential_refs(spec: PipelineSpec) -> Iterator[tuple[str, CredentialRef]]:
    """Every credential reference of the spec with its field path."""
    for i, sink in enumerate(spec.sinks):
        yield f"spec.sinks[{i}].postgres.dsn", sink.postgres.dsn
    if spec.control is not None:
        yield "spec.control.dsn", spec.control.dsn
    if spec.source.kafka is not None:
        for option, ref in sorted(spec.source.kafka.secret_options.items()):
            yield f"spec.source.kafka.secretOptions[{option}]", ref
    store = spec.checkpoint.s3
    if store is not None:
        if store.access_key_id is not None:
            yield "spec.checkpoint.s3.accessKeyId", store.access_key_id
        if store.secret_access_key is not None:
            yield "spec.checkpoint.s3.secretAccessKey", store.secret_access_key


def durable_mounts(driver: Driver) -> list[str]:
    """Mount paths in the driver container whose volume outlives the pod."""
    mounts = [driver.volume_mount_path] if driver.volume_claim else []
    if driver.pod_template is not None:
        pod = driver.pod_template.spec
        volumes = {v.get("name"): v for v in pod.get("volumes") or [] if isinstance(v, dict)}
        for container in pod.get("containers") or []:
            if not isinstance(container, dict) or container.get("name") != DRIVER_CONTAINER:
                continue
            for mount in container.get("volumeMounts") or []:
                volume = volumes.get(mount.get("name"), {})
                if volume and not SCRATCH_VOLUMES & set(volume):
                    mounts.append(str(mount.get("mountPath", "")))
    return mounts


def checkpoint_problem(spec: PipelineSpec) -> str | None:
    """Why the checkpoint would not survive a relaunch of the driver pod, if it would not."""
    location = spec.checkpoint.location
    scheme = location.split(":", 1)[0] if ":" in location.split("/", 1)[0] else ""
    if scheme and scheme != "file":
        return None  # an object store or a distributed file system
    path = "/" + location[len("file:") :].lstrip("/") if scheme else location
    mount = spec.driver.volume_mount_path
    if not path.startswith("/"):
        return (
            f"{location} is not an absolute path on the driver's volume: write it under "
            f"driver.volumeMountPath ({mount}), or use an object store (s3a://bucket/path)"
        )
    path = posixpath.normpath(path)
    for durable in durable_mounts(spec.driver):
        root = posixpath.normpath(durable)
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return None
    if spec.driver.volume_claim is None:
        return (
            f"{location} is not on the driver's volume (none is mounted), so it is lost when "
            "the driver pod is replaced: set driver.volumeClaim to a PersistentVolumeClaim, "
            f"mounted at driver.volumeMountPath ({mount}), and put the checkpoint under it, or "
            "use an object store (s3a://bucket/path)"
        )
    return (
        f"{location} is not on the driver's volume, so it is lost when the driver pod is "
        f"replaced: put it under driver.volumeMountPath ({mount}), where volumeClaim "
        f"{spec.driver.volume_claim} is mounted, or use an object store (s3a://bucket/path)"
    )
