"""Generate the ExactlyOncePipeline CRD from the pydantic models (``eo crd``).

Kubernetes wants a *structural* OpenAPI v3 schema: no ``$ref``, no ``anyOf`` of types, a
``type`` on every node. Pydantic's JSON schema is turned into one here: references are inlined,
``Optional[X]`` becomes ``X`` with ``nullable: true``, single-value literals become enums, and
the CEL rules declared next to the model validators ride along as
``x-kubernetes-validations``, so the API server enforces the same cross-field rules.
"""

from __future__ import annotations

from typing import Any

import yaml

from eo_jobs.spec.models import (
    GROUP,
    KIND,
    NAME_MAX_LENGTH,
    PLURAL,
    SHORT_NAME,
    SINGULAR,
    VERSION,
    PipelineSpec,
    PipelineStatus,
    model_schema,
)

_KEEP = {
    "type",
    "properties",
    "required",
    "items",
    "enum",
    "default",
    "description",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "maxProperties",
    "additionalProperties",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
    "nullable",
    "format",
}

PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Epoch", "type": "integer", "jsonPath": ".status.epoch"},
    {"name": "Last batch", "type": "integer", "jsonPath": ".status.lastBatchId"},
    {"name": "Last commit", "type": "date", "jsonPath": ".status.lastCommitTime"},
    {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts"},
    # The continuous audit's verdict (True: no violation so far; False: latched until
    # acknowledged), where people look first.
    {
        "name": "Audited",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Audited")].status',
    },
    {"name": "Guarantee", "type": "string", "jsonPath": ".spec.guarantee", "priority": 1},
    {
        "name": "In doubt",
        "type": "integer",
        "jsonPath": ".status.inDoubtTransactions",
        "priority": 1,
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def structural(node: Any, defs: dict[str, Any]) -> Any:
    """Turn one pydantic JSON-schema node into a structural OpenAPI node."""
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return structural(merged, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if len(options) != 1:
            raise ValueError(f"cannot express a union in a structural schema: {node}")
        optional: dict[str, Any] = structural({**options[0], **rest}, defs)
        optional["nullable"] = True
        if optional.get("default", "absent") is None:
            del optional["default"]
        return optional
    if "const" in node:
        node = {**{k: v for k, v in node.items() if k != "const"}, "enum": [node["const"]]}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in _KEEP or (key == "additionalProperties" and value is False):
            continue
        if key == "additionalProperties" and node.get("x-kubernetes-preserve-unknown-fields"):
            continue  # an object of any shape: preserving unknown fields is the whole schema
        if key == "properties":
            out[key] = {name: structural(sub, defs) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = structural(value, defs)
        else:
            out[key] = value
    if "type" not in out:
        if "properties" in out:
            out["type"] = "object"
        elif "enum" in out:
            out["type"] = "string"
    if out.get("default", "absent") is None:
        del out["default"]
    return out


def openapi_schema(model: type[PipelineSpec] | type[PipelineStatus]) -> dict[str, Any]:
    """Structural schema of one model."""
    raw = model_schema(model)
    return dict(structural(raw, raw.get("$defs", {})))


def metadata_rules() -> list[dict[str, str]]:
    """CEL on ``metadata.name`` (only allowed at the root), mirroring ``ObjectMeta.name``."""
    return [
        {
            "rule": f"size(self.metadata.name) <= {NAME_MAX_LENGTH}",
            "message": f"metadata.name must be at most {NAME_MAX_LENGTH} characters: the "
            "operator labels the pipeline's pods and services with it",
        }
    ]


def crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition object."""
    spec_schema = openapi_schema(PipelineSpec)
    spec_schema["description"] = "Desired state of the pipeline."
    status_schema = openapi_schema(PipelineStatus)
    status_schema["description"] = "Observed state, written by the eo operator."
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "eo"},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": [SHORT_NAME],
                "categories": ["eo", "all"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": (
                                "A Spark Structured Streaming pipeline delivered exactly once "
                                "into its sinks with a fenced two-phase commit."
                            ),
                            "required": ["spec"],
                            "x-kubernetes-validations": metadata_rules(),
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


def crd_yaml() -> str:
    """The CRD as the YAML committed under ``crds/`` (header says how to regenerate)."""
    header = "# Generated by `eo crd > crds/exactlyoncepipelines.eo.dev.yaml`; do not edit.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=100)
