"""The Spark configuration of a driver: what an s3a:// checkpoint adds, and what it never does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from eo_jobs.runtime.packages import hadoop_aws_jars, writer_jars
from eo_jobs.runtime.session import (
    CHECKPOINT_MANAGER_KEY,
    LOCAL_CHECKPOINT_MANAGER,
    LOCAL_FILE_SYSTEM_KEY,
    RAW_LOCAL_FILE_SYSTEM,
    executor_template_conf,
    spark_conf,
)
from eo_jobs.spec import SpecError, parse_pipeline
from eo_jobs.spec.models import PipelineSpec
from eo_jobs.spec.s3 import MissingS3CredentialError, credential_env

REPO = Path(__file__).resolve().parents[2]


def _spec(checkpoint: dict[str, object]) -> PipelineSpec:
    doc = yaml.safe_load((REPO / "examples" / "orders-ledger.yaml").read_text())
    doc["spec"]["checkpoint"] = checkpoint
    doc["spec"]["source"] = {"files": {"path": "/in", "format": "json", "schema": "id BIGINT"}}
    return parse_pipeline(doc).spec


S3 = {
    "location": "s3a://ckpt/orders",
    "s3": {
        "endpoint": "http://minio:9000",
        "region": "eu-west-1",
        "pathStyleAccess": True,
        "accessKeyId": {"env": "STORE_ID"},
        "secretAccessKey": {"env": "STORE_SECRET"},
    },
}


def test_an_s3a_checkpoint_puts_s3a_on_the_class_path_and_points_it_at_the_store() -> None:
    conf = spark_conf(_spec(S3), "app", environ={"STORE_ID": "id", "STORE_SECRET": "top-secret"})

    assert set(conf["spark.jars"].split(",")) == {str(jar) for jar in hadoop_aws_jars() + _writer()}
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://minio:9000"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith(
        "EnvironmentVariableCredentialsProvider"
    )
    assert not any("top-secret" in value for value in conf.values())


def test_without_keys_the_sdk_chain_with_web_identity_is_used() -> None:
    conf = spark_conf(_spec({"location": "s3a://ckpt/orders"}), "app", environ={})

    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith(
        "auth.credentials.DefaultCredentialsProvider"
    )
    assert "spark.hadoop.fs.s3a.endpoint" not in conf


def test_a_local_checkpoint_adds_no_s3_jars_and_no_s3_settings() -> None:
    conf = spark_conf(_spec({"location": "/data/ckpt"}), "app", environ={})

    assert set(conf["spark.jars"].split(",")) == {str(jar) for jar in _writer()}
    assert not any(key.startswith("spark.hadoop.fs.s3a") for key in conf)


def test_keys_by_env_reference_become_the_variables_s3a_reads() -> None:
    env = credential_env(_spec(S3).checkpoint, {"STORE_ID": "id", "STORE_SECRET": "s"})

    assert env == {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "s"}


def test_a_missing_key_names_the_field_and_the_variable() -> None:
    with pytest.raises(MissingS3CredentialError) as caught:
        credential_env(_spec(S3).checkpoint, {"STORE_ID": "id"})

    assert "spec.checkpoint.s3.secretAccessKey" in str(caught.value)
    assert "STORE_SECRET" in str(caught.value)


def _with_conf(spark: dict[str, str], hadoop: dict[str, str]) -> PipelineSpec:
    doc = yaml.safe_load((REPO / "examples" / "orders-ledger.yaml").read_text())
    doc["spec"]["sparkConf"] = spark
    doc["spec"]["hadoopConf"] = hadoop
    return parse_pipeline(doc).spec


def test_user_spark_and_hadoop_settings_reach_spark_and_override_eos_defaults() -> None:
    spec = _with_conf(
        {"spark.sql.shuffle.partitions": "7", "spark.ui.enabled": "false"},
        {"fs.gs.project.id": "ledger-prod"},
    )

    conf = spark_conf(spec, "app", environ={})

    assert conf["spark.sql.shuffle.partitions"] == "7"
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.hadoop.fs.gs.project.id"] == "ledger-prod"
    assert conf["spark.sql.session.timeZone"] == "UTC"


def test_the_spark_ui_is_on_read_only_at_the_port_the_driver_service_exposes() -> None:
    conf = spark_conf(_with_conf({}, {}), "app", environ={})

    assert conf["spark.ui.enabled"] == "true"
    assert conf["spark.ui.port"] == "4040"
    assert conf["spark.ui.killEnabled"] == "false"


@pytest.mark.parametrize(
    ("field", "key", "hint"),
    [
        ("sparkConf", "spark.master", "spec.executors"),
        ("sparkConf", "spark.ui.port", "4040"),
        ("sparkConf", "spark.driver.blockManager.port", "fixed ports"),
        ("sparkConf", "spark.executor.memory", "spec.executors.memory"),
        ("sparkConf", "spark.kubernetes.executor.podTemplateFile", "spec.driver"),
        ("sparkConf", "spark.hadoop.fs.s3a.endpoint", "spec.hadoopConf"),
        ("sparkConf", "spark.sql.session.timeZone", "UTC"),
        ("sparkConf", "spark.kafka.sasl.jaas.config", "Secrets"),
        ("hadoopConf", "fs.s3a.endpoint", "spec.checkpoint.s3.endpoint"),
        ("hadoopConf", "fs.s3a.secret.key", "Secrets"),
        ("hadoopConf", "fs.azure.account.key.acct.dfs.core.windows.net.password", "Secrets"),
    ],
)
def test_a_key_eo_manages_or_a_credential_is_refused_naming_the_key_and_the_fix(
    field: str, key: str, hint: str
) -> None:
    spark, hadoop = ({key: "x"}, {}) if field == "sparkConf" else ({}, {key: "x"})
    with pytest.raises(SpecError) as caught:
        _with_conf(spark, hadoop)
    message = str(caught.value)
    assert f"spec.{field}" in message and key in message and hint in message


def _with_executors(executors: dict[str, object]) -> PipelineSpec:
    doc = yaml.safe_load((REPO / "examples" / "orders-ledger.yaml").read_text())
    doc["spec"]["executors"] = executors
    return parse_pipeline(doc).spec


def test_an_executor_pod_template_is_written_for_spark_with_its_executor_container(
    tmp_path: Path,
) -> None:
    template = {
        "metadata": {"labels": {"team": "payments"}},
        "spec": {"tolerations": [{"key": "spark", "operator": "Exists"}]},
    }
    spec = _with_executors({"instances": 2, "podTemplate": template})

    conf = executor_template_conf(spec, tmp_path)

    written = yaml.safe_load(Path(conf["spark.kubernetes.executor.podTemplateFile"]).read_text())
    assert conf["spark.kubernetes.executor.podTemplateContainerName"] == "executor"
    assert written["kind"] == "Pod" and written["metadata"]["labels"] == {"team": "payments"}
    assert [c["name"] for c in written["spec"]["containers"]] == ["executor"]
    assert written["spec"]["tolerations"][0]["key"] == "spark"


def test_executor_pods_get_the_drivers_security_floor_without_a_template(tmp_path: Path) -> None:
    conf = executor_template_conf(_with_executors({"instances": 2}), tmp_path)

    written = yaml.safe_load(Path(conf["spark.kubernetes.executor.podTemplateFile"]).read_text())
    assert written["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (executor,) = written["spec"]["containers"]
    assert executor["name"] == "executor"
    assert executor["securityContext"] == {
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    # The root filesystem is read-only: /tmp is an emptyDir (Spark adds its own local dirs).
    assert executor["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert written["spec"]["volumes"] == [{"name": "tmp", "emptyDir": {}}]


def test_where_the_platform_assigns_uids_executor_pods_name_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The operator tells the driver (EO_PLATFORM_ASSIGNS_UID) when the chart says openshift.
    monkeypatch.setenv("EO_PLATFORM_ASSIGNS_UID", "true")
    conf = executor_template_conf(_with_executors({"instances": 2}), tmp_path)

    written = yaml.safe_load(Path(conf["spark.kubernetes.executor.podTemplateFile"]).read_text())
    assert written["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert written["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_an_executor_template_tightens_the_floor_and_adds_its_own_mounts(tmp_path: Path) -> None:
    template = {
        "spec": {
            "securityContext": {"runAsUser": 20000},
            "volumes": [{"name": "tls", "secret": {"secretName": "kafka-tls"}}],
            "containers": [
                {
                    "name": "executor",
                    "securityContext": {"capabilities": {"drop": ["ALL", "NET_RAW"]}},
                    "volumeMounts": [{"name": "tls", "mountPath": "/etc/kafka-tls"}],
                }
            ],
        }
    }
    spec = _with_executors({"instances": 2, "podTemplate": template})

    conf = executor_template_conf(spec, tmp_path)

    written = yaml.safe_load(Path(conf["spark.kubernetes.executor.podTemplateFile"]).read_text())
    assert written["spec"]["securityContext"]["runAsUser"] == 20000
    assert written["spec"]["securityContext"]["runAsNonRoot"] is True
    (executor,) = written["spec"]["containers"]
    assert executor["securityContext"]["readOnlyRootFilesystem"] is True
    assert executor["securityContext"]["capabilities"]["drop"] == ["ALL", "NET_RAW"]
    assert [m["mountPath"] for m in executor["volumeMounts"]] == ["/tmp", "/etc/kafka-tls"]
    assert [v["name"] for v in written["spec"]["volumes"]] == ["tmp", "tls"]


@pytest.mark.parametrize(
    ("context", "field"),
    [
        ({"runAsUser": 0}, "spec.securityContext.runAsUser"),
        ({"runAsNonRoot": False}, "spec.securityContext.runAsNonRoot"),
    ],
)
def test_an_executor_template_cannot_weaken_the_floor(context: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as caught:
        _with_executors({"instances": 2, "podTemplate": {"spec": {"securityContext": context}}})
    assert f"spec.executors.podTemplate.{field}" in str(caught.value)


def test_no_executor_template_in_local_mode(tmp_path: Path) -> None:
    template = {"metadata": {"labels": {"team": "payments"}}}
    local = _with_executors({"instances": 0, "podTemplate": template})
    assert executor_template_conf(local, tmp_path) == {}


def test_an_executor_template_may_not_replace_the_executor_command() -> None:
    template = {"spec": {"containers": [{"name": "executor", "args": ["bash"]}]}}
    with pytest.raises(SpecError) as caught:
        _with_executors({"instances": 2, "podTemplate": template})
    assert "spec.executors.podTemplate.spec.containers[0].args" in str(caught.value)


def _with_source(path: str, spark: dict[str, str] | None = None) -> PipelineSpec:
    doc = yaml.safe_load((REPO / "examples" / "orders-ledger.yaml").read_text())
    doc["spec"]["source"] = {"files": {"path": path, "format": "json", "schema": "id BIGINT"}}
    doc["spec"]["sparkConf"] = spark or {}
    return parse_pipeline(doc).spec


def test_the_write_path_gets_arrow_batches_of_20000_records_and_one_file_split_per_core() -> None:
    conf = spark_conf(_with_source("/data/in"), "app", environ={})

    assert conf["spark.sql.execution.arrow.maxRecordsPerBatch"] == "20000"
    assert conf["spark.sql.files.maxPartitionBytes"] == str(1 << 30)


def test_the_write_path_turns_off_the_arrow_byte_cap_at_the_value_spark_skips_sizing_for() -> None:
    # Spark sizes the Arrow batch after every row unless maxBytesPerBatch is exactly
    # Int.MaxValue; its own default (64 MiB) keeps the check on, so leaving it unset is not off.
    conf = spark_conf(_with_source("/data/in"), "app", environ={})

    assert conf["spark.sql.execution.arrow.maxBytesPerBatch"] == str(2**31 - 1)


def test_driver_and_executors_collect_garbage_with_the_throughput_collector() -> None:
    conf = spark_conf(_with_source("/data/in"), "app", environ={})

    assert conf["spark.driver.extraJavaOptions"] == "-XX:+UseParallelGC"
    assert conf["spark.executor.extraJavaOptions"] == "-XX:+UseParallelGC"


@pytest.mark.parametrize(
    ("path", "driver_lists"),
    [
        ("/data/in", True),
        ("file:///data/in", True),
        ("s3a://bucket/in", False),
        ("gs://bucket/in", False),
        ("HDFS://nn/in", False),
    ],
)
def test_a_local_file_source_lists_in_the_driver_and_an_object_store_keeps_parallel_listing(
    path: str, driver_lists: bool
) -> None:
    conf = spark_conf(_with_source(path), "app", environ={})

    key = "spark.sql.sources.parallelPartitionDiscovery.threshold"
    assert (conf.get(key) == "100000") is driver_lists


@pytest.mark.parametrize(
    ("key", "value"),
    [
        # Spark's checkpoint writer on Hadoop's FileSystem API (a store keeps FileContext).
        (CHECKPOINT_MANAGER_KEY, LOCAL_CHECKPOINT_MANAGER),
        # Hadoop's raw local file system for file: paths (a store keeps Hadoop's default).
        (LOCAL_FILE_SYSTEM_KEY, RAW_LOCAL_FILE_SYSTEM),
    ],
)
def test_a_local_checkpoint_gets_eos_local_file_settings_a_store_keeps_the_defaults(
    key: str, value: str
) -> None:
    local = spark_conf(_spec({"location": "/data/ckpt"}), "app", environ={})
    mounted = spark_conf(_spec({"location": "file:///data/ckpt"}), "app", environ={})
    store = spark_conf(_spec(S3), "app", environ={"STORE_ID": "i", "STORE_SECRET": "s"})

    assert local[key] == value
    assert mounted[key] == value
    assert key not in store


def test_the_users_hadoop_conf_replaces_the_raw_local_file_system() -> None:
    spec = _with_conf({}, {"fs.file.impl": "org.apache.hadoop.fs.LocalFileSystem"})

    conf = spark_conf(spec, "app", environ={})

    assert conf[LOCAL_FILE_SYSTEM_KEY] == "org.apache.hadoop.fs.LocalFileSystem"


def test_the_write_path_defaults_yield_to_the_users_spark_settings() -> None:
    spark = {
        "spark.sql.execution.arrow.maxRecordsPerBatch": "5000",
        "spark.sql.execution.arrow.maxBytesPerBatch": str(16 << 20),
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "32",
        "spark.driver.extraJavaOptions": "-XX:+UseG1GC -Xss4m",
    }
    conf = spark_conf(_with_source("/data/in", spark), "app", environ={})

    assert conf["spark.sql.execution.arrow.maxRecordsPerBatch"] == "5000"
    assert conf["spark.sql.execution.arrow.maxBytesPerBatch"] == str(16 << 20)
    assert conf["spark.sql.sources.parallelPartitionDiscovery.threshold"] == "32"
    assert conf["spark.driver.extraJavaOptions"] == "-XX:+UseG1GC -Xss4m"


def _writer() -> list[Path]:
    jars = writer_jars()
    assert not isinstance(jars, str), jars  # ./dev setup builds it
    return jars


def test_the_jvm_writer_and_its_jdbc_driver_go_on_the_class_path_when_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Both JDBC drivers the writer's tasks use (pgJDBC, MariaDB Connector/J) are beside it, so
    # spark.jars (lines 49 and 71) carries them.
    names = {jar.name for jar in _writer()}
    assert "eo-writer.jar" in names
    assert any(name.startswith("postgresql-") for name in names), names
    assert any(name.startswith("mariadb-java-client-") for name in names), names
    monkeypatch.setenv("EO_CACHE", str(tmp_path))  # a cache where it was never built

    conf = spark_conf(_spec({"location": "/data/ckpt"}), "app", environ={})

    assert "spark.jars" not in conf
