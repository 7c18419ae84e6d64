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
