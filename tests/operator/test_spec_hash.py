"""What restarts a running driver: the spec hash on its pod (review operator-2, N6).

A driver is stopped at a batch boundary and relaunched whenever the hash the operator computes
for the pipeline differs from the one on its pod. So the hash must move with what the driver
runs (the spec fields it reads, its image) and with nothing else: not with fields only the
operator reads (alerts, restartPolicy), and not with an operator upgrade that merely adds a
field with a default, which used to restart every driver of the cluster at once.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import Field

from eo_jobs.spec import parse_pipeline
from eo_jobs.spec.models import Driver, Pipeline, PipelineSpec
from eo_operator import legacy_hash, resources

REPO = Path(__file__).resolve().parents[2]
IMAGE = "registry.example/eo-job:1.4.0"
PRE_FIX_LABEL = "fdf1d69d04cdde11"
"""The ``eo.dev/spec-hash`` label the operator put on the driver pod of ``DOC`` before the hash
was narrowed (computed with that operator's ``spec_hash``): such a pod must still count as
current after the upgrade."""

LABEL_0_1_0 = "7a6b3787529fe4b9"
"""The label eo 0.1.0 put on the driver pod of ``DOC_0_1_0`` (computed with its ``spec_hash``)."""

DOC: dict[str, Any] = {
    "apiVersion": "eo.dev/v1alpha1",
    "kind": "ExactlyOncePipeline",
    "metadata": {"name": "orders", "namespace": "shop"},
    "spec": {
        "source": {
            "kafka": {
                "bootstrapServers": "kafka:9092",
                "topics": ["orders"],
                "schema": "id BIGINT, amount BIGINT",
                "secretOptions": {
                    "kafka.sasl.jaas.config": {"secretKeyRef": {"name": "kafka", "key": "jaas"}}
                },
            }
        },
        "transform": {"sql": "SELECT id, amount FROM source"},
        "sinks": [
            {
                "name": "ledger",
                "postgres": {
                    "dsn": {"secretKeyRef": {"name": "db", "key": "dsn"}},
                    "table": "public.ledger",
                    "mode": "upsert",
                    "keyColumns": ["id"],
                },
            }
        ],
        "checkpoint": {"location": "s3a://bucket/orders", "s3": {"endpoint": "http://minio:9000"}},
        "driver": {
            "cores": 2,
            "podTemplate": {
                "metadata": {"labels": {"team": "payments"}},
                "spec": {"nodeSelector": {"pool": "spark"}},
            },
        },
        "executors": {"instances": 2},
        "sparkConf": {"spark.sql.shuffle.partitions": "8"},
    },
}


DOC_0_1_0: dict[str, Any] = {
    "apiVersion": "eo.dev/v1alpha1",
    "kind": "ExactlyOncePipeline",
    "metadata": {"name": "orders", "namespace": "shop"},
    "spec": {
        "source": {
            "kafka": {
                "bootstrapServers": "kafka:9092",
                "topics": ["orders"],
                "schema": "id BIGINT, amount BIGINT",
                "options": {"kafka.security.protocol": "SSL"},
            }
        },
        "transform": {"sql": "SELECT id, amount FROM source"},
        "sinks": [
            {
                "name": "ledger",
                "postgres": {
                    "dsn": {"secretKeyRef": {"name": "db", "key": "dsn"}},
                    "table": "public.ledger",
                    "mode": "upsert",
                    "keyColumns": ["id"],
                },
            }
        ],
        "checkpoint": {"location": "s3a://bucket/orders"},
        "driver": {"cores": 2},
        "executors": {"instances": 2},
        "alerts": {"maxFailureRatePercent": 2.5},
    },
}
"""A pipeline with only the fields eo 0.1.0 had."""


def _pipeline(**spec: Any) -> Pipeline:
    doc = copy.deepcopy(DOC)
    doc["spec"].update(spec)
    return parse_pipeline(doc)


def _hash(pipeline: Pipeline, default_image: str = IMAGE) -> str:
    return resources.spec_hash(pipeline, resources.job_image(pipeline, default_image))


class _UpgradedDriver(Driver):
    """``Driver`` as a later operator version might have it: one more field, with a default."""

    jvm_options: str = ""


class _UpgradedSpec(PipelineSpec):
    """``PipelineSpec`` of that later version: a new top-level field and the new driver."""

    fleet_priority: int = 0
    driver: _UpgradedDriver = Field(default_factory=_UpgradedDriver)


def _upgraded(pipeline: Pipeline) -> Pipeline:
    """The same object as parsed by an operator whose models gained defaulted fields."""
    spec = _UpgradedSpec.model_validate(
        {
            **pipeline.spec.model_dump(by_alias=True),
            "driver": _UpgradedDriver.model_validate(
                pipeline.spec.driver.model_dump(by_alias=True)
            ),
        }
    )
    return pipeline.model_copy(update={"spec": spec})


def test_an_alerts_edit_does_not_restart_the_driver() -> None:
    # Only the operator reads spec.alerts (it exports the thresholds as metrics).
    assert _hash(_pipeline()) == _hash(_pipeline(alerts={"noCommitFloorSeconds": 600}))
    assert _hash(_pipeline()) == _hash(_pipeline(alerts={"maxFailureRatePercent": 1.5}))


def test_a_restart_policy_edit_does_not_restart_the_driver() -> None:
    # Backoff, restart budget, start timeout and kept failed pods govern the operator only.
    edited = _pipeline(restartPolicy={"maxRestarts": 9, "startTimeoutSeconds": 900})
    assert _hash(_pipeline()) == _hash(edited)


def test_suspend_is_not_in_the_hash() -> None:
    assert _hash(_pipeline()) == _hash(_pipeline(suspend=True))


def test_a_field_an_upgrade_adds_with_its_default_does_not_restart_the_driver() -> None:
    pipeline = _pipeline()
    upgraded = _upgraded(pipeline)
    assert upgraded.spec.model_dump(by_alias=True)["fleetPriority"] == 0
    assert _hash(upgraded) == _hash(pipeline)
    # Once someone sets the new field, the driver does restart.
    set_it = upgraded.model_copy(
        update={"spec": upgraded.spec.model_copy(update={"fleet_priority": 3})}
    )
    assert _hash(set_it) != _hash(pipeline)


def test_a_default_written_out_hashes_as_when_it_is_left_out() -> None:
    # What the API server stores depends on who wrote the object (a user, a tool that fills in
    # defaults, a CRD that defaults a field): the same effective spec is the same hash.
    explicit = _pipeline(
        guarantee="exactly-once",
        deadLetter={},
        hadoopConf={},
        restartNonce=0,
        driver={**DOC["spec"]["driver"], "memory": "1g", "metricsPort": 9108},
        executors={"instances": 2, "cores": 1, "memory": "1g"},
        checkpoint={**DOC["spec"]["checkpoint"], "triggerIntervalSeconds": 10},
    )
    assert _hash(explicit) == _hash(_pipeline())


@pytest.mark.parametrize(
    "edit",
    [
        {"transform": {"sql": "SELECT id FROM source"}},
        {"driver": {"cores": 4}},
        {"driver": {**DOC["spec"]["driver"], "memory": "2g"}},
        {"executors": {"instances": 0}},
        {"sparkConf": {"spark.sql.shuffle.partitions": "16"}},
        {"hadoopConf": {"fs.s3a.connection.maximum": "64"}},
        {"checkpoint": {**DOC["spec"]["checkpoint"], "triggerIntervalSeconds": 30}},
        {"driver": {**DOC["spec"]["driver"], "podTemplate": {"spec": {}}}},
        {"restartNonce": 1},
        {"lifecycle": {"snapshot": {"nonce": "before-upgrade"}}},
        {"lifecycle": {"startOver": {"nonce": "new-input", "allowReread": True}}},
    ],
    ids=lambda edit: next(iter(edit)) + str(next(iter(edit.values())))[:30],
)
def test_an_edit_of_what_the_driver_reads_restarts_it(edit: dict[str, Any]) -> None:
    assert _hash(_pipeline(**edit)) != _hash(_pipeline())


def test_a_restart_nonce_changed_back_to_its_default_still_restarts() -> None:
    # restartNonce exists to force a restart: 1 -> 0 is a change like 0 -> 1.
    assert _hash(_pipeline(restartNonce=1)) != _hash(_pipeline(restartNonce=0))


def test_a_new_lifecycle_nonce_restarts_the_driver_that_does_the_action() -> None:
    # The driver takes the snapshot at its start: a new nonce must restart it.
    before = _pipeline(lifecycle={"snapshot": {"nonce": "a"}})
    assert _hash(_pipeline(lifecycle={"snapshot": {"nonce": "b"}})) != _hash(before)


def test_a_new_operator_job_image_restarts_drivers_that_do_not_pin_one() -> None:
    pipeline = _pipeline()
    assert _hash(pipeline, "eo-job:1.4.0") != _hash(pipeline, "eo-job:1.5.0")
    pinned = _pipeline(driver={**DOC["spec"]["driver"], "image": "eo-job:1.3.2"})
    assert resources.job_image(pinned, "eo-job:1.5.0") == "eo-job:1.3.2"
    assert _hash(pinned, "eo-job:1.4.0") == _hash(pinned, "eo-job:1.5.0")


def test_the_driver_pod_carries_the_hash_of_its_own_image() -> None:
    pipeline = _pipeline()
    owner = {"metadata": {"name": "orders", "uid": "u-1"}}
    pod = resources.driver_pod(pipeline, owner, 3, IMAGE, "eo-driver")
    assert pod["metadata"]["labels"][resources.LABEL_SPEC_HASH] == _hash(pipeline)


def test_the_operator_only_fields_are_fields_of_the_spec() -> None:
    # A renamed field would silently fall back into the hash.
    assert resources.OPERATOR_ONLY_FIELDS.issubset(PipelineSpec.model_fields)
    assert "restart_nonce" not in resources.OPERATOR_ONLY_FIELDS


def test_the_old_formula_gives_the_label_the_last_operator_with_it_put_on_a_driver() -> None:
    assert PRE_FIX_LABEL in legacy_hash.legacy_spec_hashes(_pipeline())
    # suspend was never in it; everything else was.
    assert PRE_FIX_LABEL in legacy_hash.legacy_spec_hashes(_pipeline(suspend=True))
    assert PRE_FIX_LABEL not in legacy_hash.legacy_spec_hashes(_pipeline(restartNonce=1))


def test_the_old_formula_gives_the_label_eo_0_1_0_put_on_a_driver() -> None:
    assert LABEL_0_1_0 in legacy_hash.legacy_spec_hashes(parse_pipeline(DOC_0_1_0))


def test_a_field_eo_0_1_0_did_not_have_set_since_is_a_change_its_label_does_not_cover() -> None:
    # The driver of eo 0.1.0 cannot have run with sparkConf: the spec changed since its launch.
    doc = copy.deepcopy(DOC_0_1_0)
    doc["spec"]["sparkConf"] = {"spark.sql.shuffle.partitions": "8"}
    assert LABEL_0_1_0 not in legacy_hash.legacy_spec_hashes(parse_pipeline(doc))
    # At its default it is no change.
    doc["spec"]["sparkConf"] = {}
    assert LABEL_0_1_0 in legacy_hash.legacy_spec_hashes(parse_pipeline(doc))


def test_the_old_formula_leaves_out_fields_added_later_at_their_default() -> None:
    # A driver still carrying an old label must not be restarted by a later upgrade either...
    upgraded = _upgraded(_pipeline())
    assert PRE_FIX_LABEL in legacy_hash.legacy_spec_hashes(upgraded)
    # ... and is restarted when someone sets the new field.
    set_it = upgraded.model_copy(
        update={"spec": upgraded.spec.model_copy(update={"fleet_priority": 3})}
    )
    assert legacy_hash.legacy_spec_hashes(set_it) == frozenset()


def _crd_fields(node: dict[str, Any]) -> Any:
    """The shape of a CRD schema node, as ``legacy_hash`` writes shapes."""
    if node.get("type") == "object" and "properties" in node:
        return {key: _crd_fields(value) for key, value in node["properties"].items()}
    if node.get("type") == "array":
        return _crd_fields(node.get("items") or {})
    values = node.get("additionalProperties")
    if isinstance(values, dict):
        inner = _crd_fields(values)
        return None if inner is None else {"*": inner}
    return None


def test_the_fields_of_eo_0_1_0_are_those_of_its_crd() -> None:
    crd = yaml.safe_load((REPO / "crds/compat/exactlyoncepipelines.eo.dev.v0.1.0.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    fields = _crd_fields(schema)
    del fields["suspend"]
    assert fields == legacy_hash.FIELDS_0_1_0
