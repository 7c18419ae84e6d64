"""The spec hashes drivers launched before the hash was narrowed carry (review operator-2, N6).

Until then ``spec_hash`` hashed the whole spec but ``suspend``, defaults included, and not
the image. A driver launched then keeps that label for as long as it runs, and comparing it
with today's hash would say "spec changed" for every pipeline at once, on the upgrade itself:
the restart storm the narrower hash exists to prevent. So the planner also takes a pod whose
label is the old formula's hash of the current spec as current
(``Observation.legacy_spec_hashes``).

The old formula hashed the spec's fields as the operator that launched the driver knew them.
Two sets of fields are known here (``LEGACY_SHAPES``): eo 0.1.0's, the release, and those of
the last operator with the old formula. A field added since either, at its default, is left
out (otherwise it would change the old hash too, and the next upgrade would restart every
driver still carrying an old label: a streaming driver can run for months); a field the old
operator did not know, set to anything but its default, cannot have been in the pod's spec, so
the old formula does not describe the spec at all and the driver restarts. A driver takes the
new label on its next restart, whatever its cause; once no driver launched before the change
runs, this module can go.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, TypeAlias

from eo_jobs.spec.models import Pipeline
from eo_operator.resources import digest

Shape: TypeAlias = "Mapping[str, Shape | None]"
"""Which keys of a dumped spec to keep: a nested shape for an object (applied to each item of a
list), None to keep a value whole, the key ``*`` for every key of a map."""

FIELDS_AT_RETIREMENT: Shape = {
    "guarantee": None,
    "source": {
        "files": {
            "path": None,
            "format": None,
            "schema": None,
            "maxFilesPerTrigger": None,
            "options": None,
        },
        "kafka": {
            "bootstrapServers": None,
            "topics": None,
            "startingOffsets": None,
            "maxOffsetsPerTrigger": None,
            "format": None,
            "schema": None,
            "options": None,
            "secretOptions": {"*": {"secretKeyRef": {"name": None, "key": None}, "env": None}},
        },
    },
    "transform": {"sql": None},
    "sinks": {
        "name": None,
        "postgres": {
            "dsn": {"secretKeyRef": {"name": None, "key": None}, "env": None},
            "table": None,
            "mode": None,
            "keyColumns": None,
            "versionColumn": None,
            "writerPartitions": None,
            "onRefusedRecord": None,
        },
    },
    "control": {"dsn": {"secretKeyRef": {"name": None, "key": None}, "env": None}},
    "deadLetter": {"table": None},
    "checkpoint": {
        "location": None,
        "triggerIntervalSeconds": None,
        "s3": {
            "endpoint": None,
            "region": None,
            "pathStyleAccess": None,
            "accessKeyId": {"secretKeyRef": {"name": None, "key": None}, "env": None},
            "secretAccessKey": {"secretKeyRef": {"name": None, "key": None}, "env": None},
        },
    },
    "driver": {
        "cores": None,
        "memory": None,
        "image": None,
        "serviceAccount": None,
        "metricsPort": None,
        "volumeClaim": None,
        "volumeMountPath": None,
        "podTemplate": {"metadata": {"labels": None, "annotations": None}, "spec": None},
    },
    "executors": {
        "instances": None,
        "cores": None,
        "memory": None,
        "podTemplate": {"metadata": {"labels": None, "annotations": None}, "spec": None},
    },
    "restartPolicy": {
        "maxRestarts": None,
        "backoffSeconds": None,
        "maxBackoffSeconds": None,
        "windowSeconds": None,
        "startTimeoutSeconds": None,
        "keepFailedPods": None,
    },
    "alerts": {
        "maxCheckpointDurationSeconds": None,
        "maxFailureRatePercent": None,
        "noCommitFloorSeconds": None,
    },
    "restartNonce": None,
    "sparkConf": None,
    "hadoopConf": None,
}
"""The fields of ``PipelineSpec`` (camelCase, as dumped) when the old formula was retired, but
``suspend``, which it never hashed."""

ADDED_AFTER_0_1_0 = (
    "source.kafka.secretOptions",
    "sinks.postgres.onRefusedRecord",
    "control",
    "checkpoint.s3",
    "driver.podTemplate",
    "executors.podTemplate",
    "restartPolicy.startTimeoutSeconds",
    "restartPolicy.keepFailedPods",
    "alerts.noCommitFloorSeconds",
    "restartNonce",
    "sparkConf",
    "hadoopConf",
)
"""The fields of ``FIELDS_AT_RETIREMENT`` eo 0.1.0 did not have (its CRD:
``crds/compat/exactlyoncepipelines.eo.dev.v0.1.0.yaml``)."""


def _without(shape: Shape, paths: tuple[str, ...]) -> Shape:
    """``shape`` with the fields at ``paths`` (dotted, camelCase) removed."""
    out: dict[str, Any] = copy.deepcopy(dict(shape))
    for path in paths:
        *parents, name = path.split(".")
        node = out
        for parent in parents:
            node = node[parent]
        del node[name]
    return out


FIELDS_0_1_0 = _without(FIELDS_AT_RETIREMENT, ADDED_AFTER_0_1_0)
"""The fields of eo 0.1.0's spec, but ``suspend``."""
LEGACY_SHAPES = (FIELDS_0_1_0, FIELDS_AT_RETIREMENT)


def legacy_spec_hashes(pipeline: Pipeline) -> frozenset[str]:
    """The labels the old formula gave a driver of ``pipeline``'s current spec, one per
    operator version in ``LEGACY_SHAPES`` whose fields can describe it: every field it knew
    but ``suspend``, defaults included, no image."""
    spec = pipeline.spec
    full = spec.model_dump(mode="json", by_alias=True, exclude={"suspend"})
    changed = spec.model_dump(
        mode="json", by_alias=True, exclude={"suspend"}, exclude_defaults=True
    )
    return frozenset(
        digest(_pruned(full, shape)) for shape in LEGACY_SHAPES if _within(changed, shape)
    )


def _within(value: Any, shape: Shape | None) -> bool:
    """Whether ``value`` has no key ``shape`` does not name, at any level."""
    if shape is None:
        return True
    if isinstance(value, list):
        return all(_within(item, shape) for item in value)
    if not isinstance(value, dict):
        return True
    if "*" in shape:
        return all(_within(item, shape["*"]) for item in value.values())
    return all(key in shape and _within(item, shape[key]) for key, item in value.items())


def _pruned(value: Any, shape: Shape | None) -> Any:
    """``value`` with only the keys ``shape`` names, at every level."""
    if shape is None:
        return value
    if isinstance(value, list):
        return [_pruned(item, shape) for item in value]
    if not isinstance(value, dict):
        return value
    if "*" in shape:
        return {key: _pruned(item, shape["*"]) for key, item in value.items()}
    return {key: _pruned(item, shape[key]) for key, item in value.items() if key in shape}
