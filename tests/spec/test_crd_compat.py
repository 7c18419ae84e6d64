"""The generated CRD stays compatible with the last released one."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from eo_jobs.spec.compat import incompatibilities
from eo_jobs.spec.crd import crd

BASELINE = Path("crds") / "compat" / "exactlyoncepipelines.eo.dev.v0.1.0.yaml"


def _spec_props(obj: dict[str, Any]) -> dict[str, Any]:
    schema = obj["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    props: dict[str, Any] = schema["properties"]["spec"]["properties"]
    return props


def test_the_generated_crd_breaks_nothing_stored_under_the_released_one(repo_root: Path) -> None:
    baseline = yaml.safe_load((repo_root / BASELINE).read_text())
    assert incompatibilities(baseline, crd()) == []


def test_a_removed_field_is_an_incompatibility() -> None:
    new = copy.deepcopy(crd())
    del _spec_props(new)["suspend"]
    assert incompatibilities(crd(), new) == ["v1alpha1.spec.suspend: field removed"]


def test_a_removed_enum_value_is_an_incompatibility() -> None:
    new = copy.deepcopy(crd())
    _spec_props(new)["guarantee"]["enum"].remove("idempotent")
    assert incompatibilities(crd(), new) == [
        "v1alpha1.spec.guarantee: enum values removed: idempotent"
    ]


def test_a_type_change_is_an_incompatibility() -> None:
    new = copy.deepcopy(crd())
    _spec_props(new)["suspend"]["type"] = "string"
    assert incompatibilities(crd(), new) == [
        "v1alpha1.spec.suspend: type changed from boolean to string"
    ]


def test_a_newly_required_field_is_an_incompatibility() -> None:
    new = copy.deepcopy(crd())
    schema = new["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    schema["required"] = [*schema.get("required", []), "suspend"]
    assert incompatibilities(crd(), new) == ["v1alpha1.spec: newly required: suspend"]


def test_adding_an_optional_field_is_compatible() -> None:
    new = copy.deepcopy(crd())
    _spec_props(new)["newThing"] = {"type": "string"}
    assert incompatibilities(crd(), new) == []
