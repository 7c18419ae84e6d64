"""The operator's check of the served CRD against its own schema (operator audit N2)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from eo_jobs.spec.crd import crd
from eo_operator.crd_check import OutdatedCrdError, check_definition, missing_properties

REPO = Path(__file__).resolve().parents[2]
V0_1_0 = REPO / "crds" / "compat" / "exactlyoncepipelines.eo.dev.v0.1.0.yaml"


def _schema(definition: dict[str, Any]) -> dict[str, Any]:
    return definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def test_the_v0_1_0_crd_is_refused_naming_the_status_fields_it_would_drop_and_the_fix() -> None:
    with pytest.raises(OutdatedCrdError) as refused:
        check_definition(yaml.safe_load(V0_1_0.read_text()))
    message = str(refused.value)
    assert "is older than this operator: it has no status." in message
    assert "status.recoveredEpoch" in message and "status.lastFailure" in message
    assert "kubectl apply --server-side -f charts/eo/crds/" in message


def test_the_operators_own_crd_and_a_newer_one_pass() -> None:
    own = crd()
    check_definition(own)
    newer = copy.deepcopy(own)
    _schema(newer)["properties"]["spec"]["properties"]["futureField"] = {"type": "string"}
    for prop in _schema(newer)["properties"]["spec"]["properties"].values():
        prop["description"] = "reworded"
    check_definition(newer)


def test_a_property_missing_deep_in_a_list_is_named_with_its_path() -> None:
    served = copy.deepcopy(crd())
    sink = _schema(served)["properties"]["spec"]["properties"]["sinks"]["items"]
    del sink["properties"]["postgres"]["properties"]["auditColumn"]
    with pytest.raises(
        OutdatedCrdError, match=r"it has no spec\.sinks\[\]\.postgres\.auditColumn\."
    ):
        check_definition(served)


def test_a_crd_that_does_not_serve_the_operators_version_is_refused() -> None:
    served = copy.deepcopy(crd())
    served["spec"]["versions"][0]["served"] = False
    with pytest.raises(OutdatedCrdError, match="does not serve version v1alpha1"):
        check_definition(served)


def test_a_node_that_keeps_unknown_fields_holds_anything_below_it() -> None:
    own = {"properties": {"a": {"properties": {"b": {"type": "string"}}}}}
    assert missing_properties({"properties": {"a": {}}}, own) == ["a.b"]
    kept = {"properties": {"a": {"x-kubernetes-preserve-unknown-fields": True}}}
    assert missing_properties(kept, own) == []
    assert missing_properties({}, own) == ["a"]
