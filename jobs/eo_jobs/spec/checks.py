"""What ``eo validate`` checks beyond the schema, for where the pipeline will run.

A pipeline is meant either for Kubernetes (``kubectl apply``; the operator runs it) or for a
local ``eo run``. On Kubernetes, credentials come from Secrets (``env`` references name
variables of the user's shell, which no pod has) and the checkpoint must outlive the driver
pod: on the driver's PersistentVolumeClaim or in an object store. The operator refuses the
first later (``InvalidSpec``); the second it cannot see, and the pipeline would fail with a
lost checkpoint at its first relaunch. With executors, a files source must be on the executor
pods too; the operator refuses that one as well.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from typing import Literal

from eo_jobs.spec import sql
from eo_jobs.spec.documents import SpecProblem
from eo_jobs.spec.models import (
    API_VERSION,
    EXECUTOR_CONTAINER,
    CredentialRef,
    Driver,
    Pipeline,
    PipelineSpec,
)

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
    executor_problem = executor_input_problem(pipeline.spec)
    if executor_problem:
        found.append(executor_problem)
    return found


def credential_refs(spec: PipelineSpec) -> Iterator[tuple[str, CredentialRef]]:
    """Every credential reference of the spec with its field path."""
    for i, sink in enumerate(spec.sinks):
        yield f"spec.sinks[{i}].{sink.kind}.dsn", sink.target.dsn
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


def executor_mounts(spec: PipelineSpec) -> list[str]:
    """Mount paths every executor pod has: the driver's claim, which eo mounts on executors at
    the same path, and the executor template's mounts in the executor container."""
    mounts = [spec.driver.volume_mount_path] if spec.driver.volume_claim else []
    template = spec.executors.pod_template
    if template is not None:
        for container in template.spec.get("containers") or []:
            if isinstance(container, dict) and container.get("name") == EXECUTOR_CONTAINER:
                mounts += [
                    str(mount.get("mountPath", ""))
                    for mount in container.get("volumeMounts") or []
                    if isinstance(mount, dict)
                ]
    return mounts


def _local_path(location: str) -> str | None:
    """The file-system path of a location, or None for a URI of another file system."""
    scheme = location.split(":", 1)[0] if ":" in location.split("/", 1)[0] else ""
    if scheme and scheme != "file":
        return None  # an object store or a distributed file system
    return "/" + location[len("file:") :].lstrip("/") if scheme else location


def _under(path: str, mounts: list[str]) -> bool:
    path = posixpath.normpath(path)
    for mount in mounts:
        root = posixpath.normpath(mount)
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return True
    return False


def executor_input_problem(spec: PipelineSpec) -> SpecProblem | None:
    """Why executor pods could not read the files source, if they could not.

    Spark lists a files source on the driver but reads the files in tasks, on the executors,
    so with ``executors.instances > 0`` its folder must be on every executor too. The
    checkpoint is not checked: only the driver writes it (offsets and commit log; eo keeps no
    state store), so a checkpoint on the driver's own volume serves executors as well.
    """
    files = spec.source.files
    if spec.executors.instances == 0 or files is None:
        return None
    path = _local_path(files.path)
    if path is None or (path.startswith("/") and _under(path, executor_mounts(spec))):
        return None
    mount = spec.driver.volume_mount_path
    where = (
        f"under driver.volumeMountPath ({mount}), where volumeClaim {spec.driver.volume_claim} "
        "is mounted on the driver and, by eo, on every executor"
        if spec.driver.volume_claim
        else f"on driver.volumeClaim, a ReadWriteMany PersistentVolumeClaim that eo mounts at "
        f"driver.volumeMountPath ({mount}) on the driver and on every executor"
    )
    return SpecProblem(
        "spec.source.files.path",
        f"{files.path} is on no volume of the executor pods, but with executors.instances "
        f"{spec.executors.instances} the executors read the files (Spark reads them in tasks): "
        f"put the folder {where}, mount it in executors.podTemplate (container "
        f"{EXECUTOR_CONTAINER}), use a URI every pod reaches (s3a://bucket/path), or set "
        "executors.instances: 0",
    )


def checkpoint_problem(spec: PipelineSpec) -> str | None:
    """Why the checkpoint would not survive a relaunch of the driver pod, if it would not."""
    location = spec.checkpoint.location
    path = _local_path(location)
    if path is None:
        return None
    mount = spec.driver.volume_mount_path
    if not path.startswith("/"):
        return (
            f"{location} is not an absolute path on the driver's volume: write it under "
            f"driver.volumeMountPath ({mount}), or use an object store (s3a://bucket/path)"
        )
    if _under(path, durable_mounts(spec.driver)):
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
