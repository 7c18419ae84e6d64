"""Manifests of what a pipeline owns: the spec ConfigMap, the headless Service, the driver Pod.

Pure functions of the pipeline object and an epoch. Pod names carry the epoch
(``<pipeline>-<hash>-driver-e<epoch>``), so creating a driver is idempotent and a pod is tied to
the one epoch it was launched with; its labels carry the epoch and a hash of what the driver runs
(``spec_hash``), which is how the planner notices both zombies and spec changes. Every derived
name carries a short hash of the full pipeline name, so two pipelines never share an object
however their names are cut to fit; the pipeline name itself is a label value, which the CRD
keeps within 63 characters.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any

import yaml

from eo_jobs.protocol.control import FENCE_OWNER_ENV
from eo_jobs.sinks.postgres.credentials import CONTROL_ENV, env_var_for
from eo_jobs.spec import kafka, pod_template, s3
from eo_jobs.spec.models import API_VERSION, KIND, Pipeline
from eo_operator.fence_owner import fence_owner

LABEL_PIPELINE = "eo.dev/pipeline"
LABEL_EPOCH = "eo.dev/epoch"
LABEL_SPEC_HASH = "eo.dev/spec-hash"
ANNOTATION_GENERATION = "eo.dev/generation"
"""The driver pod's annotation with the metadata.generation of the spec it was launched with
(``status.driverGeneration``, ``status.lastStable.generation``): read back from the pod, it
survives an operator restart as the spec hash label does."""
COMPONENT = "app.kubernetes.io/component"
MANAGED_BY = "app.kubernetes.io/managed-by"
SPEC_KEY = "pipeline.yaml"
MEMORY_UNITS = {"k": "Ki", "m": "Mi", "g": "Gi", "t": "Ti"}
UI_PORT = 4040
"""The Spark UI (``spark.ui.port``, pinned by the driver): ``kubectl port-forward svc/<driver
Service> 4040`` reaches it."""


DRIVER_POD_SELECTOR = f"{MANAGED_BY}=eo,{COMPONENT}=driver"
"""Labels every driver pod carries and no other pod eo makes (executor pods carry
``component: executor``, ``eo_jobs.runtime.session.EXECUTOR_LABELS``, the chart's pods
``managed-by: Helm``; a pod template cannot replace eo's labels): the operator lists and watches
only the pods that match (``main.configure``), and the chart's driver NetworkPolicy selects
them."""

OPERATOR_ONLY_FIELDS = frozenset({"suspend", "alerts", "restart_policy", "audit"})
"""Spec fields (attribute names of ``PipelineSpec``) the driver never reads, left out of
``spec_hash`` so that editing them never restarts it: ``suspend`` stops the driver by a rule of
its own; ``alerts`` are thresholds the operator exports as metrics; ``restartPolicy`` governs
the operator's relaunches, start timeout and kept failed pods. ``restartNonce`` is not one of
them: changing it is how a user asks for a restart."""


def job_image(pipeline: Pipeline, default: str) -> str:
    """The image the driver (and its executors) run: ``spec.driver.image``, else the operator's
    job image ``default`` (``EO_JOB_IMAGE``, the chart's ``driver.image``)."""
    return pipeline.spec.driver.image or default


def spec_hash(pipeline: Pipeline, image: str) -> str:
    """Hash of what a driver runs: the spec fields it reads and its ``image`` (``job_image``).

    A driver whose pod carries another hash is stopped at a batch boundary and relaunched, so
    the hash moves with nothing else. Fields only the operator reads are left out
    (``OPERATOR_ONLY_FIELDS``), and so are fields at their default: a field a newer operator
    adds, with a default, would otherwise change every pipeline's hash and restart every
    driver of the cluster at once; and a default a user writes out hashes as when it is left
    out. The image counts because a driver keeps the image it started with: a new operator
    job image reaches a driver only through a restart.
    """
    spec = pipeline.spec.model_dump(
        mode="json", by_alias=True, exclude=set(OPERATOR_ONLY_FIELDS), exclude_defaults=True
    )
    return digest({"spec": spec, "image": image})


def digest(data: Any) -> str:
    """The 16 hex characters of a spec hash (a label value) for JSON-able ``data``."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


DNS_LABEL = 63
"""Service names are DNS-1035 labels (a letter first); ConfigMaps are fine as labels too."""
POD_NAME_LIMIT = 47
"""Spark uses the driver pod's name as its executor pod name prefix (``<prefix>-exec-<id>``),
which it limits to 63 - 16 characters."""
NAME_HASH_LENGTH = 8


def _dns(name: str, suffix: str, limit: int = DNS_LABEL) -> str:
    """``<name, made a label and cut>-<hash of the full name><suffix>``, at most ``limit`` long.

    The hash keeps names apart that mapping or cutting would merge (``orders.v1`` and
    ``orders-v1``; long names sharing a prefix); a name that does not start with a letter gets
    ``eo-`` first, so the result is a DNS-1035 label (what a Service name must be).
    """
    digest = hashlib.sha256(name.encode()).hexdigest()[:NAME_HASH_LENGTH]
    tail = f"-{digest}{suffix}"
    base = re.sub(r"[^a-z0-9-]", "-", name.lower())
    if not base[:1].isalpha():
        base = f"eo-{base}"
    return base[: limit - len(tail)].rstrip("-") + tail


def driver_name(pipeline: Pipeline, epoch: int) -> str:
    """Pod name of the driver of ``epoch``."""
    return _dns(pipeline.metadata.name, f"-driver-e{epoch}", POD_NAME_LIMIT)


def configmap_name(pipeline: Pipeline) -> str:
    """Name of the ConfigMap holding the pipeline spec for drivers."""
    return spec_configmap_name(pipeline.metadata.name)


def spec_configmap_name(name: str) -> str:
    """Name of the spec ConfigMap of the pipeline object ``name`` (also when its spec does not
    parse any more: the ConfigMap then holds the last spec a driver ran with)."""
    return _dns(name, "-spec")


def service_name(pipeline: Pipeline) -> str:
    """Headless Service of the driver (executors reach the driver through it)."""
    return _dns(pipeline.metadata.name, "-driver")


def owner_reference(obj: dict[str, Any]) -> dict[str, Any]:
    """Owner reference to the pipeline object, so garbage collection follows deletion."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _labels(pipeline: Pipeline) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "eo",
        MANAGED_BY: "eo",
        LABEL_PIPELINE: pipeline.metadata.name,
    }


def stable_configmap_name(name: str) -> str:
    """Name of the ConfigMap holding a copy of the last stable spec of the pipeline object
    ``name`` (``status.lastStable``): what an automatic rollback relaunches."""
    return _dns(name, "-stable")


def spec_configmap(
    pipeline: Pipeline,
    obj: dict[str, Any],
    generation: int | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """The pipeline as the driver reads it (``$EO_PIPELINE_SPEC``).

    Fields at their default are left out, and so is ``spec.audit``, which only the operator
    reads: a driver pinned to an older job image (``spec.driver.image``) refuses a spec with a
    field its model does not know, so a field added since (``sinks[].postgres.addColumns: []``)
    must not reach it unless the pipeline sets it. The driver's model gives the defaults back.

    Its ``eo.dev/generation`` annotation is the metadata.generation the spec came from: while
    the object's spec is refused, this ConfigMap is the last good spec a failed driver is
    relaunched from, with that generation (``planner.LastGood``). ``generation`` is given for
    a spec that is not the object's (the last stable one, relaunched by a rollback); ``name``
    for the copy of the last stable spec (``stable_configmap_name``).
    """
    document = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": pipeline.metadata.name, "namespace": pipeline.metadata.namespace},
        "spec": pipeline.spec.model_dump(
            mode="json", by_alias=True, exclude_defaults=True, exclude={"audit"}
        ),
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name or configmap_name(pipeline),
            "namespace": pipeline.metadata.namespace,
            "labels": _labels(pipeline),
            "annotations": {
                ANNOTATION_GENERATION: str(
                    obj["metadata"].get("generation", 1) if generation is None else generation
                )
            },
            "ownerReferences": [owner_reference(obj)],
        },
        "data": {SPEC_KEY: yaml.safe_dump(document, sort_keys=False)},
    }


def driver_service(pipeline: Pipeline, obj: dict[str, Any]) -> dict[str, Any]:
    """Headless Service for the driver's RPC, block manager, metrics and Spark UI ports."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(pipeline),
            "namespace": pipeline.metadata.namespace,
            "labels": _labels(pipeline),
            "ownerReferences": [owner_reference(obj)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {LABEL_PIPELINE: pipeline.metadata.name, COMPONENT: "driver"},
            "ports": [
                {"name": "driver", "port": 7078},
                {"name": "blockmanager", "port": 7079},
                {"name": "metrics", "port": pipeline.spec.driver.metrics_port},
                {"name": "ui", "port": UI_PORT},
            ],
        },
    }


def k8s_memory(spark_memory: str, overhead: float = 1.4) -> str:
    """Spark memory (``1g``) as a container limit with room for Python and off-heap."""
    unit = spark_memory[-1].lower()
    number = int(spark_memory[:-1]) if unit in MEMORY_UNITS else int(spark_memory)
    mib = {"k": number / 1024, "m": number, "g": number * 1024, "t": number * 1024 * 1024}.get(
        unit, number / (1024 * 1024)
    )
    return f"{int(mib * overhead) + 256}Mi"


NODE_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
"""The NoExecute taints the node lifecycle controller puts on a node that is not Ready."""


def node_tolerations(seconds: int) -> list[dict[str, Any]]:
    """Tolerate a not-Ready node for ``seconds`` (the operator's node-lost grace), not 300.

    Without them the DefaultTolerationSeconds admission plugin gives every pod 300 s, and for
    five minutes a driver on a lost node looks Running. With them the taint eviction controller
    deletes the pod when the operator's grace runs out too, which marks it for people
    (``DisruptionTarget``) and lets a returning kubelet stop the process.
    """
    return [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
        for key in NODE_TAINTS
    ]


def driver_pod(
    pipeline: Pipeline,
    obj: dict[str, Any],
    epoch: int,
    image: str,
    service_account: str | None,
    node_lost_seconds: int = 30,
    platform_assigns_uid: bool = False,
    generation: int | None = None,
) -> dict[str, Any]:
    """The driver Pod of ``epoch``, running ``image`` (``job_image``): non-root, read-only root
    filesystem, secrets by reference, no ServiceAccount token in local mode, replaced
    ``node_lost_seconds`` after its node stops being Ready; with no UID, GID or fsGroup where
    the platform assigns them (OpenShift), as the executor pods it creates. Its
    ``eo.dev/generation`` is ``generation`` when given (a relaunch from the last good spec
    while the object's is refused), else the object's.

    The container names no command: the image's entrypoint (tini, then docker/entrypoint.sh)
    runs ``eo run --epoch N``, so a UID without a passwd entry gets its name before Spark's
    JVM asks for it, and tini reaps the driver's orphaned Python workers."""
    spec = pipeline.spec
    env: list[dict[str, Any]] = [
        {
            "name": "EO_PIPELINE_SPEC",
            "valueFrom": {"configMapKeyRef": {"name": configmap_name(pipeline), "key": SPEC_KEY}},
        },
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "EO_JOB_IMAGE", "value": image},
        {
            "name": "EO_DRIVER_HOST",
            "value": f"{service_name(pipeline)}.{pipeline.metadata.namespace}.svc",
        },
        {"name": "HOME", "value": "/tmp"},  # noqa: S108 (an emptyDir of the pod)
        # The fence owner the operator claimed the sink fence for (the object's UID): the
        # driver refuses to run under a fence another writer owns.
        {"name": FENCE_OWNER_ENV, "value": fence_owner(obj)},
    ]
    if platform_assigns_uid:
        env.append({"name": pod_template.ASSIGNED_UID_ENV, "value": "true"})
    for sink in spec.sinks:
        ref = sink.target.dsn.secret_key_ref
        if ref is not None:
            env.append(
                {
                    "name": env_var_for(sink.name),
                    "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}},
                }
            )
    control = spec.control.dsn.secret_key_ref if spec.control else None
    if control is not None:
        env.append(
            {
                "name": CONTROL_ENV,
                "valueFrom": {"secretKeyRef": {"name": control.name, "key": control.key}},
            }
        )
    secret_env = s3.secret_env(spec.checkpoint) | kafka.secret_env(spec.source.kafka)
    for variable, (secret, key) in sorted(secret_env.items()):
        env.append({"name": variable, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    mounts = [{"name": "tmp", "mountPath": "/tmp"}]  # noqa: S108 (emptyDir)
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
    if spec.driver.volume_claim:
        mounts.append({"name": "data", "mountPath": spec.driver.volume_mount_path})
        volumes.append(
            {"name": "data", "persistentVolumeClaim": {"claimName": spec.driver.volume_claim}}
        )
    labels = {
        **_labels(pipeline),
        COMPONENT: "driver",
        LABEL_EPOCH: str(epoch),
        LABEL_SPEC_HASH: spec_hash(pipeline, image),
    }
    memory = k8s_memory(spec.driver.memory)
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": driver_name(pipeline, epoch),
            "namespace": pipeline.metadata.namespace,
            "labels": labels,
            "ownerReferences": [owner_reference(obj)],
            "annotations": {
                "eo.dev/epoch": str(epoch),
                ANNOTATION_GENERATION: str(
                    obj["metadata"].get("generation", 1) if generation is None else generation
                ),
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 60,
            "securityContext": pod_template.pod_security_context(platform_assigns_uid),
            "containers": [
                {
                    "name": "driver",
                    "image": image,
                    "args": ["run", "--epoch", str(epoch)],
                    "env": env,
                    "ports": [
                        {"name": "metrics", "containerPort": spec.driver.metrics_port},
                        {"name": "driver", "containerPort": 7078},
                        {"name": "blockmanager", "containerPort": 7079},
                        {"name": "ui", "containerPort": UI_PORT},
                    ],
                    "resources": {
                        "requests": {"cpu": str(spec.driver.cores), "memory": memory},
                        "limits": {"memory": memory},
                    },
                    "securityContext": copy.deepcopy(dict(pod_template.CONTAINER_SECURITY_CONTEXT)),
                    "volumeMounts": mounts,
                    # A failed driver's last log lines become its termination message, which
                    # the operator copies into status.lastFailure and its event.
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                }
            ],
            "volumes": volumes,
            "tolerations": node_tolerations(node_lost_seconds),
        },
    }
    if service_account:
        pod["spec"]["serviceAccountName"] = service_account
    if spec.executors.instances == 0:
        # Local mode: Spark runs local[N] and the driver never calls the API server (only a
        # driver with executors creates pods). Without this every container of the pod,
        # template sidecars included, could use the token of the drivers' ServiceAccount.
        pod["spec"]["automountServiceAccountToken"] = False
    if spec.driver.pod_template is not None:
        template = spec.driver.pod_template.model_dump(by_alias=True)
        pod = pod_template.merged(pod, template, "driver")
    return pod
