"""values.yaml is fully documented, values.schema.json closes every object, typos fail."""

from __future__ import annotations

import json
import re
from typing import Any

import helm_python
import pytest
import yaml

from tests.chart.helm import CHART, render, set_values
from tests.scripts import load_script

SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
VALUES_TEXT = (CHART / "values.yaml").read_text()


@pytest.mark.parametrize(
    ("expression", "complaint"),
    [
        ("operator.replicaCont=2", "additional properties 'replicaCont' not allowed"),
        ("monitoring.prometheusRules.enabled=true", "'prometheusRules' not allowed"),
        ("driver.podmonitor.enabled=true", "'podmonitor' not allowed"),
        ("replicaCount=2", "'replicaCount' not allowed"),
        ("operator.replicaCount=two", "/operator/replicaCount"),
        ("operator.image.pullPolicy=Sometimes", "/operator/image/pullPolicy"),
        ("operator.watchNamespaces={Team_A}", "/operator/watchNamespaces/0"),
        ("operator.serviceMonitor.interval=30", "/operator/serviceMonitor/interval"),
    ],
)
def test_a_mistyped_or_ill_typed_set_is_rejected_with_the_offending_key(
    expression: str, complaint: str
) -> None:
    with pytest.raises(helm_python.HelmValuesError) as failure:
        render(set_values(expression))
    assert complaint in str(failure.value)


def test_the_default_values_satisfy_the_schema() -> None:
    with helm_python.Chart.load(CHART) as chart:
        chart.validate_schema(chart.values)


def _open_objects(node: Any, path: str = "$") -> list[str]:
    """Paths of schema objects that accept keys they do not declare with a scalar type."""
    found: list[str] = []
    if not isinstance(node, dict):
        return found
    if node.get("type") == "object" or "properties" in node:
        extra = node.get("additionalProperties")
        if extra is not False and not (isinstance(extra, dict) and _scalar(extra)):
            found.append(path)
    for name, child in node.get("properties", {}).items():
        found += _open_objects(child, f"{path}.{name}")
    for keyword in ("items", "additionalProperties"):
        found += _open_objects(node.get(keyword), f"{path}[{keyword}]")
    for keyword in ("anyOf", "oneOf", "allOf"):
        for i, child in enumerate(node.get(keyword, [])):
            found += _open_objects(child, f"{path}[{keyword}{i}]")
    return found


def _scalar(schema: dict[str, Any]) -> bool:
    """A map's value schema that admits no nested structure (labels, quantities)."""
    if "anyOf" in schema:
        return all(_scalar(option) for option in schema["anyOf"])
    return schema.get("type") in {"string", "number", "integer", "boolean"}


def test_every_object_in_the_schema_is_closed_or_a_map_of_scalars_except_global() -> None:
    # `global` is open on purpose: an umbrella chart hands every subchart all its globals.
    assert SCHEMA["additionalProperties"] is False
    assert SCHEMA["properties"]["global"]["additionalProperties"] is True
    assert _open_objects(SCHEMA) == ["$.global"]


def test_only_kubernetes_api_objects_are_left_to_the_api_server_to_check() -> None:
    # Security contexts, affinity and env entries are Kubernetes types: the schema types the
    # fields eo sets and the API server checks the rest. Nothing else may hide behind a $ref.
    assert all(name.startswith("io.k8s.api.") for name in SCHEMA["definitions"])
    refs = re.findall(r'"\$ref": "#/definitions/([^"]+)"', json.dumps(SCHEMA))
    assert set(refs) == set(SCHEMA["definitions"])


def _keys_match(values: dict[str, Any], schema: dict[str, Any], path: str) -> list[str]:
    if schema.get("additionalProperties") is not False:
        return []  # a free-form map (labels, resources): its keys are user data
    declared = set(schema["properties"])
    problems = [f"{path}.{k}: in values.yaml, not in the schema" for k in set(values) - declared]
    problems += [f"{path}.{k}: in the schema, not in values.yaml" for k in declared - set(values)]
    for key in set(values) & declared:
        if isinstance(values[key], dict):
            problems += _keys_match(values[key], schema["properties"][key], f"{path}.{key}")
    return problems


def test_values_yaml_and_the_schema_declare_the_same_keys() -> None:
    assert _keys_match(yaml.safe_load(VALUES_TEXT), SCHEMA, "$") == []


def _leaves(values: dict[str, Any], prefix: str = "") -> set[str]:
    """Dotted paths of every value a user sets as a whole (scalars, lists, empty maps)."""
    found: set[str] = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        found |= _leaves(value, f"{path}.") if isinstance(value, dict) and value else {path}
    return found


def test_every_value_in_values_yaml_has_a_helm_docs_comment() -> None:
    documented = {row.key for row in load_script("generate_chart_readme").rows(VALUES_TEXT)}
    assert _leaves(yaml.safe_load(VALUES_TEXT)) - documented == set()
