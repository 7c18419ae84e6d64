"""The generated CRD on a real kube-apiserver: users' YAML accepted, invalid YAML rejected with
the field named, printer columns shown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cluster.plugin import KubeCluster

INVALID = {
    "upsert-without-keys.yaml": "keyColumns",
    "unknown-format.yaml": "spec.source.files.format",
    "table-without-schema.yaml": "spec.sinks[0].postgres.table",
    "two-sources.yaml": "spec.source",
    "reserved-sink-name.yaml": "spec.sinks[0].name",
    "s3-scheme.yaml": "spec.checkpoint.location",
    "s3-half-keys.yaml": "spec.checkpoint.s3.accessKeyId",
    "spark-conf-managed-key.yaml": "spec.sparkConf",
    "hadoop-conf-credential.yaml": "spec.hadoopConf",
    "kafka-literal-jaas.yaml": "spec.source.kafka.options",
    "kafka-fail-on-data-loss.yaml": "spec.source.kafka.options",
    "files-drop-malformed.yaml": "spec.source.files.options",
    "accumulate-at-least-once.yaml": "spec.sinks",
    "accumulate-without-add-columns.yaml": "spec.sinks[0].postgres.addColumns",
    "sum-columns-upsert.yaml": "spec.sinks[0].postgres.sumColumns",
    "sum-columns-at-least-once.yaml": "spec.sinks",
    "audit-column-upsert.yaml": "spec.sinks[0].postgres.auditColumn",
    "progress-timeout-below-a-batch.yaml": "spec.restartPolicy.progressTimeoutSeconds",
    "audit-append-only-upsert.yaml": "spec.audit.appendOnly",
}
NOT_AT_ADMISSION = {
    "pod-template-driver-command.yaml": "the pod template keeps unknown fields (a whole pod "
    "spec), which CEL cannot read; eo validate and the operator refuse it",
}
"""Invalid examples the API server cannot refuse, and why: every other one must be in INVALID,
so a refusal added to the models without its CEL twin fails the completeness test."""


def test_every_invalid_example_is_refused_at_admission_or_says_why_not(repo_root: Path) -> None:
    examples = {p.name for p in (repo_root / "examples" / "invalid").glob("*.yaml")}
    assert examples == set(INVALID) | set(NOT_AT_ADMISSION)
    assert not set(INVALID) & set(NOT_AT_ADMISSION)


def test_the_example_is_accepted_and_listed_with_its_printer_columns(
    crd_installed: KubeCluster, repo_root: Path
) -> None:
    example = str(repo_root / "examples" / "orders-ledger.yaml")
    crd_installed.kubectl("apply", "-f", example)
    try:
        listed = crd_installed.kubectl("get", "eop", "orders-ledger", "-n", "default").stdout
    finally:
        crd_installed.kubectl("delete", "-f", example, "--wait=false")
    header = listed.splitlines()[0].split()
    assert header[:2] == ["NAME", "PHASE"]
    for column in ("EPOCH", "LAST", "BATCH", "COMMIT", "RESTARTS", "AGE"):
        assert column in header
    explained = crd_installed.kubectl("explain", "exactlyoncepipeline.spec.sinks.postgres.table")
    assert "schema.table" in explained.stdout


@pytest.mark.parametrize("name", ["orders-kafka-sasl.yaml", "orders-totals.yaml"])
def test_an_example_is_accepted(crd_installed: KubeCluster, repo_root: Path, name: str) -> None:
    example = str(repo_root / "examples" / name)
    crd_installed.kubectl("apply", "-f", example)
    crd_installed.kubectl("delete", "-f", example, "--wait=false")


@pytest.mark.parametrize(("name", "field"), sorted(INVALID.items()))
def test_an_invalid_example_is_rejected_by_the_api_server_naming_the_field(
    crd_installed: KubeCluster, kube_namespace: str, repo_root: Path, name: str, field: str
) -> None:
    result = crd_installed.kubectl(
        "apply",
        "-n",
        kube_namespace,
        "-f",
        str(repo_root / "examples" / "invalid" / name),
        check=False,
    )
    assert result.returncode != 0
    assert field in result.stderr, result.stderr


def _kafka_pipeline(**kafka: object) -> str:
    source = {"bootstrapServers": "kafka:9093", "topics": ["orders"], "schema": "id BIGINT"}
    return json.dumps(
        {
            "apiVersion": "eo.dev/v1alpha1",
            "kind": "ExactlyOncePipeline",
            "metadata": {"name": "kafka-secret-options"},
            "spec": {
                "source": {"kafka": {**source, **kafka}},
                "sinks": [
                    {
                        "name": "ledger",
                        "postgres": {
                            "dsn": {"secretKeyRef": {"name": "db", "key": "dsn"}},
                            "table": "public.ledger",
                        },
                    }
                ],
                "checkpoint": {"location": "s3a://checkpoints/ledger"},
            },
        }
    )


REF = {"secretKeyRef": {"name": "orders-kafka", "key": "jaas"}}


@pytest.mark.parametrize(
    ("kafka", "message"),
    [
        ({"options": {"KAFKA.SSL.KEY.PASSWORD": "x"}}, "options may not carry credentials"),
        ({"secretOptions": {"sasl.jaas.config": REF}}, "secretOptions keys are Kafka client"),
        (
            {
                "options": {"kafka.sasl.mechanism": "PLAIN"},
                "secretOptions": {"kafka.sasl.mechanism": REF},
            },
            "not in both",
        ),
    ],
)
def test_the_api_server_refuses_kafka_credentials_that_are_not_secret_references(
    crd_installed: KubeCluster, kube_namespace: str, kafka: dict[str, object], message: str
) -> None:
    result = crd_installed.kubectl(
        "apply", "-n", kube_namespace, "-f", "-", input=_kafka_pipeline(**kafka), check=False
    )
    assert result.returncode != 0
    assert "spec.source.kafka" in result.stderr and message in result.stderr, result.stderr
