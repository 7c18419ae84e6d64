"""What `eo validate` catches beyond the schema: where the pipeline runs, and its SQL."""

from __future__ import annotations

from typing import Any

import pytest

from eo_jobs.spec import parse_pipeline
from eo_jobs.spec.checks import check
from tests.support.pipelines import document

SECRET = {"secretKeyRef": {"name": "ledger-db", "key": "dsn"}}
SCHEMA = "order_id BIGINT, merchant STRING, amount_cents BIGINT"


def _doc(**spec: Any) -> dict[str, Any]:
    """A pipeline for Kubernetes: its DSN from a Secret, its checkpoint on the driver's volume."""
    on_kubernetes: dict[str, Any] = {
        "source": {"files": {"path": "/data/in", "format": "json", "schema": SCHEMA}},
        "sinks": [{"name": "ledger", "postgres": {"dsn": SECRET, "table": "public.t"}}],
        "checkpoint": {"location": "/data/ckpt"},
        "driver": {"volumeClaim": "orders-data"},
    }
    return document(**{**on_kubernetes, **spec})


def _found(doc: dict[str, Any], target: str = "kubernetes") -> dict[str, str]:
    return {p.path: p.message for p in check(parse_pipeline(doc), target)}  # type: ignore[arg-type]


def _sql(sql: str, schema: str = SCHEMA) -> dict[str, str]:
    source = {"files": {"path": "/data/in", "format": "json", "schema": schema}}
    return _found(_doc(source=source, transform={"sql": sql}))


def test_a_pipeline_for_kubernetes_with_secrets_and_a_volume_passes() -> None:
    assert _found(_doc(transform={"sql": "SELECT order_id FROM source"})) == {}


def test_an_env_dsn_is_refused_for_kubernetes_with_the_fix_and_allowed_locally() -> None:
    doc = _doc(sinks=[{"name": "ledger", "postgres": {"dsn": {"env": "PG"}, "table": "public.t"}}])
    message = _found(doc)["spec.sinks[0].postgres.dsn.env"]
    assert "on Kubernetes use secretKeyRef" in message and "--for local" in message
    assert _found(doc, "local") == {}


def test_every_credential_reference_is_checked_for_kubernetes() -> None:
    doc = _doc(
        control={"dsn": {"env": "CONTROL"}},
        checkpoint={
            "location": "s3a://bucket/ckpt",
            "s3": {"accessKeyId": {"env": "AK"}, "secretAccessKey": SECRET},
        },
    )
    assert set(_found(doc)) == {"spec.control.dsn.env", "spec.checkpoint.s3.accessKeyId.env"}


def test_a_checkpoint_off_the_volume_is_refused_for_kubernetes() -> None:
    message = _found(_doc(checkpoint={"location": "/tmp/ckpt"}))["spec.checkpoint.location"]
    assert "/tmp/ckpt is not on the driver's volume" in message
    assert "driver.volumeMountPath (/data)" in message and "s3a://" in message


def test_a_checkpoint_without_a_volume_claim_is_refused_for_kubernetes() -> None:
    doc = _doc(driver={})
    message = _found(doc)["spec.checkpoint.location"]
    assert "set driver.volumeClaim" in message
    assert _found(doc, "local") == {}


def test_a_relative_checkpoint_is_refused_for_kubernetes() -> None:
    doc = _doc(checkpoint={"location": "ckpt/p"})
    assert "not an absolute path" in _found(doc)["spec.checkpoint.location"]
    assert _found(doc, "local") == {}


@pytest.mark.parametrize(
    ("location", "driver"),
    [
        ("s3a://bucket/ckpt", {}),
        ("file:///data/ckpt", {"volumeClaim": "orders-data"}),
        ("/mnt/ckpt/p", {"volumeClaim": "orders-data", "volumeMountPath": "/mnt/ckpt"}),
        (
            "/ckpt/p",
            {
                "podTemplate": {
                    "spec": {
                        "volumes": [{"name": "ck", "persistentVolumeClaim": {"claimName": "c"}}],
                        "containers": [
                            {
                                "name": "driver",
                                "volumeMounts": [{"name": "ck", "mountPath": "/ckpt"}],
                            }
                        ],
                    }
                }
            },
        ),
    ],
)
def test_a_checkpoint_on_a_volume_or_object_store_passes(
    location: str, driver: dict[str, Any]
) -> None:
    assert _found(_doc(checkpoint={"location": location}, driver=driver)) == {}


def test_a_checkpoint_on_a_scratch_volume_of_the_pod_template_is_refused() -> None:
    driver = {
        "podTemplate": {
            "spec": {
                "volumes": [{"name": "scratch", "emptyDir": {}}],
                "containers": [
                    {"name": "driver", "volumeMounts": [{"name": "scratch", "mountPath": "/ckpt"}]}
                ],
            }
        }
    }
    assert "spec.checkpoint.location" in _found(
        _doc(checkpoint={"location": "/ckpt"}, driver=driver)
    )


def test_a_manifest_without_api_version_is_refused_for_kubectl() -> None:
    doc = _doc()
    del doc["apiVersion"]
    assert "apiVersion: eo.dev/v1alpha1" in _found(doc)["apiVersion"]
    assert _found(doc, "local") == {}


def test_sql_that_does_not_parse_names_the_line_and_column() -> None:
    message = _sql("SELEC order_id FROM sourc WHERE")["spec.transform.sql"]
    assert "does not parse as Spark SQL" in message and "line 1, column" in message


def test_a_statement_that_is_not_a_query_is_refused() -> None:
    message = _sql("DROP TABLE public.ledger")["spec.transform.sql"]
    assert "one SELECT" in message and "DROP" in message


def test_two_statements_are_refused() -> None:
    assert "one SELECT" in _sql("SELECT order_id FROM source; SELECT 1")["spec.transform.sql"]


def test_a_column_the_schema_does_not_declare_is_named_with_the_declared_ones() -> None:
    message = _sql("SELECT order_id, amount FROM source WHERE amount > 0")["spec.transform.sql"]
    assert "amount" in message and "amount_cents" in message
    assert "spec.source.files.schema" in message


def test_a_table_other_than_source_is_refused() -> None:
    message = _sql("SELECT order_id FROM sourc")["spec.transform.sql"]
    assert "sourc" in message and "the view named source" in message


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT order_id, merchant, amount_cents FROM source WHERE amount_cents > 0",
        "SELECT merchant, sum(amount_cents) AS total FROM source GROUP BY merchant",
        "WITH big AS (SELECT * FROM source WHERE amount_cents > 100) SELECT order_id FROM big",
        "SELECT s.`order_id`, upper(s.merchant) AS m FROM source AS s",
        "SELECT ORDER_ID FROM source",
        "SELECT order_id FROM source UNION ALL SELECT order_id FROM source",
    ],
)
def test_valid_spark_sql_over_the_declared_columns_passes(sql: str) -> None:
    assert _sql(sql) == {}


def test_a_schema_that_is_not_spark_ddl_is_refused() -> None:
    message = _sql("SELECT order_id FROM source", "order_id BIGGINT, merchant")[
        "spec.source.files.schema"
    ]
    assert "not a Spark DDL schema" in message and "BIGINT" in message


def test_a_kafka_source_schema_is_checked_too() -> None:
    source = {"kafka": {"bootstrapServers": "k:9092", "topics": ["o"], "schema": "id BIGINT"}}
    found = _found(_doc(source=source, transform={"sql": "SELECT order_id FROM source"}))
    assert "spec.source.kafka.schema" in found["spec.transform.sql"]


EXECUTORS = {"instances": 2}


def test_executors_reading_a_files_source_off_their_volumes_are_refused_with_the_fix() -> None:
    doc = _doc(
        executors=EXECUTORS,
        driver={},
        source={"files": {"path": "/srv/in", "format": "json", "schema": SCHEMA}},
        checkpoint={"location": "s3a://bucket/ckpt"},
    )
    message = _found(doc)["spec.source.files.path"]
    assert "/srv/in is on no volume of the executor pods" in message
    assert "driver.volumeClaim" in message and "ReadWriteMany" in message
    assert "executors.podTemplate" in message and "executors.instances: 0" in message


def test_a_files_source_beside_the_claim_names_the_claims_mount_path() -> None:
    doc = _doc(
        executors=EXECUTORS,
        source={"files": {"path": "/srv/in", "format": "json", "schema": SCHEMA}},
    )
    message = _found(doc)["spec.source.files.path"]
    assert "under driver.volumeMountPath (/data), where volumeClaim orders-data" in message


@pytest.mark.parametrize(
    ("path", "executors"),
    [
        ("/data/in", EXECUTORS),  # on the claim, which eo mounts on executors too
        ("s3a://bucket/in", EXECUTORS),  # a URI every pod reaches
        ("/srv/in", {"instances": 0}),  # no executors: the driver reads the files
        (
            "/srv/in/today",
            {
                "instances": 2,
                "podTemplate": {
                    "spec": {
                        "volumes": [{"name": "in", "persistentVolumeClaim": {"claimName": "in"}}],
                        "containers": [
                            {
                                "name": "executor",
                                "volumeMounts": [{"name": "in", "mountPath": "/srv/in"}],
                            }
                        ],
                    }
                },
            },
        ),
    ],
)
def test_a_files_source_every_executor_reaches_passes(path: str, executors: dict[str, Any]) -> None:
    source = {"files": {"path": path, "format": "json", "schema": SCHEMA}}
    assert "spec.source.files.path" not in _found(_doc(executors=executors, source=source))


def test_a_checkpoint_on_the_drivers_volume_passes_with_executors() -> None:
    # Only the driver writes the checkpoint (offsets and commit log; no state store).
    assert _found(_doc(executors=EXECUTORS)) == {}
