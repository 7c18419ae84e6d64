"""Sink rules `eo validate` enforces or warns about before anything runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from eo_jobs.spec import SpecError, parse_pipeline

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "orders-ledger.yaml"


def _document(**postgres: object) -> dict[str, object]:
    document = yaml.safe_load(EXAMPLE.read_text())
    document["spec"]["sinks"][0]["postgres"].update(postgres)
    return dict(document)


def test_the_dead_letter_participant_name_cannot_be_a_sink_name() -> None:
    document = _document()
    document["spec"]["sinks"][0]["name"] = "eo-dead-letter"  # type: ignore[index]
    with pytest.raises(SpecError) as raised:
        parse_pipeline(document)
    assert "spec.sinks[0].name" in str(raised.value) and "reserved" in str(raised.value)


def test_validate_warns_that_upsert_order_is_undefined_without_a_version_column(
    tmp_path: Path,
) -> None:
    def validate(name: str, **postgres: object) -> str:
        spec = tmp_path / name
        spec.write_text(
            yaml.safe_dump(_document(mode="upsert", keyColumns=["order_id"], **postgres))
        )
        command = [sys.executable, "-m", "eo_jobs.cli", "validate", str(spec)]
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout

    out = validate("upsert.yaml")
    assert "warning: spec.sinks[0].postgres.versionColumn" in out and "undefined" in out
    assert "warning" not in validate("versioned.yaml", versionColumn="event_time")


TOTALS = Path(__file__).resolve().parents[2] / "examples" / "orders-totals.yaml"


def _totals(**changes: object) -> dict[str, object]:
    document = yaml.safe_load(TOTALS.read_text())
    document["spec"].update(changes)
    return dict(document)


def test_the_totals_example_gives_its_accumulate_sink_its_own_query() -> None:
    spec = parse_pipeline(_totals()).spec
    ledger, daily = spec.sinks
    assert ledger.postgres is not None and daily.postgres is not None
    assert ledger.transform is None and ledger.postgres.mode == "append"
    assert daily.transform is not None and "GROUP BY merchant" in daily.transform.sql
    assert daily.postgres.add_columns == ["volume_cents", "payments"]


def test_accumulate_is_refused_under_at_least_once_with_the_reason() -> None:
    with pytest.raises(SpecError) as raised:
        parse_pipeline(_totals(guarantee="at-least-once"))
    message = str(raised.value)
    assert "spec.sinks[1].postgres.mode" in message
    assert "would add its sums twice" in message and "set guarantee: exactly-once" in message


@pytest.mark.parametrize(
    ("postgres", "field", "words"),
    [
        ({"mode": "accumulate", "keyColumns": ["order_id"]}, "addColumns", "needs keyColumns"),
        ({"mode": "accumulate", "addColumns": ["amount_cents"]}, "keyColumns", "and addColumns"),
        ({"addColumns": ["amount_cents"]}, "addColumns", "only applies to mode accumulate"),
        (
            {"mode": "accumulate", "keyColumns": ["a"], "addColumns": ["a"]},
            "addColumns",
            "both a key column and an add column",
        ),
        (
            {"mode": "accumulate", "keyColumns": ["a"], "addColumns": ["b"], "versionColumn": "v"},
            "versionColumn",
            "only applies to mode upsert",
        ),
    ],
)
def test_accumulate_settings_are_checked_naming_the_field(
    postgres: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(SpecError) as raised:
        parse_pipeline(_document(**postgres))
    assert f"spec.sinks[0].postgres.{field}" in str(raised.value)
    assert words in str(raised.value)


@pytest.mark.parametrize(
    ("postgres", "words"),
    [
        (
            {"mode": "upsert", "keyColumns": ["order_id"], "sumColumns": ["amount_cents"]},
            "does not apply to mode upsert",
        ),
        (
            {"mode": "accumulate", "keyColumns": ["m"], "addColumns": ["a"], "sumColumns": ["b"]},
            "b: in mode accumulate sumColumns must be among addColumns",
        ),
    ],
)
def test_sum_columns_only_where_the_table_moves_by_the_batch_s_sums(
    postgres: dict[str, object], words: str
) -> None:
    with pytest.raises(SpecError) as raised:
        parse_pipeline(_document(**postgres))
    assert "spec.sinks[0].postgres.sumColumns" in str(raised.value)
    assert words in str(raised.value)


def test_sum_columns_are_refused_under_at_least_once_with_the_reason() -> None:
    with pytest.raises(SpecError) as raised:
        document = _document(sumColumns=["amount_cents"])
        document["spec"]["guarantee"] = "at-least-once"  # type: ignore[index]
        parse_pipeline(document)
    message = str(raised.value)
    assert "spec.sinks[0].postgres.sumColumns" in message
    assert "needs guarantee exactly-once" in message


def test_an_accumulate_sink_cannot_be_audited_as_append_only() -> None:
    document = _totals(audit={"appendOnly": ["daily"]})
    with pytest.raises(SpecError, match="sink daily is mode accumulate"):
        parse_pipeline(document)


@pytest.mark.parametrize(
    "postgres",
    [
        {"mode": "upsert", "keyColumns": ["order_id"], "auditColumn": "eo_batch"},
        {"mode": "accumulate", "keyColumns": ["m"], "addColumns": ["a"], "auditColumn": "b"},
    ],
    ids=["upsert", "accumulate"],
)
def test_an_audit_column_is_for_append_sinks_only(postgres: dict[str, object]) -> None:
    with pytest.raises(SpecError) as raised:
        parse_pipeline(_document(**postgres))
    assert "spec.sinks[0].postgres.auditColumn" in str(raised.value)
    assert "auditColumn only applies to mode append" in str(raised.value)


def test_an_append_sink_takes_an_audit_column() -> None:
    sink = parse_pipeline(_document(auditColumn="eo_batch")).spec.sinks[0]
    assert sink.postgres is not None
    assert sink.postgres.audit_column == "eo_batch"


def test_a_pipeline_whose_only_database_is_mysql_needs_no_spec_control() -> None:
    document = yaml.safe_load(EXAMPLE.read_text())
    sink = document["spec"]["sinks"][0]
    sink.pop("postgres")
    sink["mysql"] = {"dsn": {"env": "LEDGER_DSN"}, "table": "shop.ledger"}
    document["spec"].pop("control", None)
    spec = parse_pipeline(document).spec
    assert spec.control is None and spec.sinks[0].kind == "mysql"
    crd = Path(__file__).resolve().parents[2] / "crds" / "exactlyoncepipelines.eo.dev.yaml"
    assert "has(self.control) || has(self.sinks[0].postgres)" not in crd.read_text()
