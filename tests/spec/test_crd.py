"""The committed CRD is generated from the models, structural, and does not drift."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from eo_jobs.spec.crd import crd, crd_yaml

CRD_PATH = Path("crds") / "exactlyoncepipelines.eo.dev.yaml"


def _walk(node: Any, path: str = "") -> list[str]:
    bad: list[str] = []
    if isinstance(node, dict):
        for forbidden in ("$ref", "anyOf", "oneOf", "allOf", "title", "$defs"):
            if forbidden in node:
                bad.append(f"{path}: {forbidden}")
        if "properties" in node and node.get("type") != "object":
            bad.append(f"{path}: properties without type object")
        for key, value in node.items():
            bad.extend(_walk(value, f"{path}.{key}"))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            bad.extend(_walk(value, f"{path}[{i}]"))
    return bad


def test_the_committed_crd_matches_the_models(repo_root: Path) -> None:
    committed = (repo_root / CRD_PATH).read_text()
    assert committed == crd_yaml(), (
        "CRD drifted: run `eo crd > crds/exactlyoncepipelines.eo.dev.yaml`"
    )


def test_the_schema_is_structural_with_a_type_on_every_property() -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _walk(schema) == []


def test_the_crd_carries_names_status_printer_columns_and_cel_rules() -> None:
    obj = crd()
    assert obj["metadata"]["name"] == "exactlyoncepipelines.eo.dev"
    assert obj["spec"]["names"]["shortNames"] == ["eop"]
    version = obj["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"] if "priority" not in c]
    assert columns == [
        "Phase", "Epoch", "Last batch", "Last commit", "Restarts", "Audited", "Age"
    ]  # fmt: skip
    text = yaml.safe_dump(version)
    assert "mode upsert needs keyColumns" in text
    assert "set exactly one source" in text


def test_field_docstrings_become_descriptions() -> None:
    spec = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    sink = spec["properties"]["sinks"]["items"]["properties"]["postgres"]
    assert "schema.table" in sink["properties"]["table"]["description"]
