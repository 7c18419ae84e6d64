"""Pipeline specs: defaults, and errors that name the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from eo_jobs.spec import Guarantee, SpecError, conf, load_pipeline, parse_pipeline
from tests.support.pipelines import document as _doc
from tests.support.pipelines import problems as _problems


def test_a_minimal_spec_gets_exactly_once_and_documented_defaults() -> None:
    pipeline = parse_pipeline(_doc())
    assert pipeline.spec.guarantee is Guarantee.EXACTLY_ONCE
    assert pipeline.key == "pay/p"
    assert pipeline.spec.executors.instances == 0
    assert pipeline.spec.alerts.max_checkpoint_duration_seconds == 300
    assert pipeline.spec.dead_letter_table() == "public.t_dead_letter"


def test_upsert_without_key_columns_names_the_field_and_the_fix() -> None:
    doc = _doc(
        sinks=[
            {"name": "b", "postgres": {"dsn": {"env": "PG"}, "table": "public.b", "mode": "upsert"}}
        ]
    )
    problems = _problems(doc)
    assert "keyColumns: [order_id]" in problems["spec.sinks[0].postgres.keyColumns"]


def test_a_table_without_schema_and_an_unknown_format_are_both_reported() -> None:
    doc = _doc(
        source={"files": {"path": "/in", "format": "xml", "schema": "id INT"}},
        sinks=[{"name": "l", "postgres": {"dsn": {"env": "PG"}, "table": "ledger"}}],
    )
    problems = _problems(doc)
    assert "schema.table" in problems["spec.sinks[0].postgres.table"]
    assert "'xml'" in problems["spec.source.files.format"]


def test_a_literal_password_cannot_be_written_into_the_spec() -> None:
    doc = _doc(
        sinks=[
            {"name": "l", "postgres": {"dsn": "postgresql://u:secret@h/db", "table": "public.t"}}
        ]
    )
    assert "spec.sinks[0].postgres.dsn" in _problems(doc)
    both = _doc(
        sinks=[
            {
                "name": "l",
                "postgres": {
                    "dsn": {"env": "A", "secretKeyRef": {"name": "s", "key": "k"}},
                    "table": "public.t",
                },
            }
        ]
    )
    assert "exactly one" in _problems(both)["spec.sinks[0].postgres.dsn.secretKeyRef"]


def test_duplicate_sink_names_and_unknown_fields_are_rejected() -> None:
    sink = {"name": "l", "postgres": {"dsn": {"env": "PG"}, "table": "public.t"}}
    assert "repeated: l" in _problems(_doc(sinks=[sink, sink]))["spec.sinks"]
    assert "unknown field" in _problems(_doc(surprise=True))["spec.surprise"]


def test_idempotent_guarantee_needs_upsert_sinks() -> None:
    problems = _problems(_doc(guarantee="idempotent"))
    assert "mode upsert" in problems["spec.sinks[0].postgres.mode"]


def test_the_shipped_example_is_valid(repo_root: Path) -> None:
    pipeline = load_pipeline(repo_root / "examples" / "orders-ledger.yaml")
    assert pipeline.spec.sinks[0].postgres.table == "public.ledger"


INVALID_EXAMPLES = sorted(
    path.stem for path in (Path(__file__).parents[2] / "examples" / "invalid").glob("*.yaml")
)


def test_the_invalid_examples_are_found() -> None:
    assert len(INVALID_EXAMPLES) >= 7


@pytest.mark.parametrize("name", INVALID_EXAMPLES)
def test_every_invalid_example_is_rejected(repo_root: Path, name: str) -> None:
    with pytest.raises(SpecError):
        load_pipeline(repo_root / "examples" / "invalid" / f"{name}.yaml")


def test_a_file_without_a_pipeline_says_so(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump({"kind": "ConfigMap"}))
    with pytest.raises(SpecError, match="expected kind: ExactlyOncePipeline"):
        load_pipeline(path)


def _with_checkpoint(checkpoint: dict[str, object]) -> dict[str, object]:
    doc = yaml.safe_load(
        (Path(__file__).parents[2] / "examples" / "orders-ledger.yaml").read_text()
    )
    doc["spec"]["checkpoint"] = checkpoint
    return dict(doc)


def test_an_s3a_checkpoint_takes_endpoint_region_and_keys_by_reference() -> None:
    keys = {
        "accessKeyId": {"secretKeyRef": {"name": "store", "key": "id"}},
        "secretAccessKey": {"secretKeyRef": {"name": "store", "key": "secret"}},
    }
    pipeline = parse_pipeline(
        _with_checkpoint(
            {
                "location": "s3a://ckpt/orders",
                "s3": {"endpoint": "http://minio:9000", "pathStyleAccess": True, **keys},
            }
        )
    )
    store = pipeline.spec.checkpoint.s3
    assert store is not None and store.path_style_access and store.endpoint == "http://minio:9000"


@pytest.mark.parametrize(
    ("checkpoint", "field"),
    [
        ({"location": "/data/ckpt", "s3": {"region": "eu-west-1"}}, "spec.checkpoint.s3"),
        ({"location": "s3n://ckpt/orders"}, "spec.checkpoint.location"),
        (
            {
                "location": "s3a://ckpt/orders",
                "s3": {"secretAccessKey": {"env": "SECRET"}},
            },
            "spec.checkpoint.s3.accessKeyId",
        ),
        (
            {"location": "s3a://ckpt/orders", "s3": {"accessKeyId": "AKIAXXXX"}},
            "spec.checkpoint.s3.accessKeyId",
        ),
    ],
)
def test_s3_settings_that_cannot_work_name_their_field(
    checkpoint: dict[str, object], field: str
) -> None:
    with pytest.raises(SpecError) as caught:
        parse_pipeline(_with_checkpoint(checkpoint))
    assert field in str(caught.value)


def test_every_key_eo_manages_is_listed_in_the_install_guide(repo_root: Path) -> None:
    guide = (repo_root / "docs" / "install.md").read_text()
    for key in [*conf.MANAGED_SPARK, *conf.MANAGED_HADOOP, *conf.MANAGED_SPARK_PREFIXES]:
        assert f"`{key}" in guide, key
