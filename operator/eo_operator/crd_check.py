"""Refuse to run on a CustomResourceDefinition older than the operator (operator audit N2).

Helm installs a chart's ``crds/`` on the first install only and never upgrades them, so the
most common upgrade mistake leaves a new operator serving an old CRD. The API server then
prunes every field the old schema does not know from every write, silently: a suspended
pipeline never shows its recovery done (``status.recoveredEpoch``) and is recovered again every
pass, a driver's single failure is counted again on each pass until the pipeline is
``CrashLoop`` (``status.lastFailure``), new spec fields are dropped from the objects users apply.

So the operator reads the served CRD before it does anything else and compares its schema with
the one it was built with (``eo crd``): every property the operator's schema has must be in the
served one. A newer CRD (more properties) or one that differs only in descriptions, defaults or
validation rules passes; a missing CRD or one missing a property is refused with the command
that fixes it, and the operator exits (its pod's log says why; ``EoOperatorNotLeading`` pages).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Final

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from eo_jobs.spec.crd import crd
from eo_jobs.spec.models import GROUP, PLURAL, VERSION

CRD_NAME: Final = f"{PLURAL}.{GROUP}"
FIX: Final = (
    "apply the CRD of this operator's version before starting it: kubectl apply "
    "--server-side -f charts/eo/crds/ (from the chart of this version), or eo crd | kubectl "
    "apply --server-side -f - (Helm installs crds/ on the first install only)"
)
SHOWN: Final = 8
"""Missing properties named in the message at most (the rest are counted)."""


class OutdatedCrdError(RuntimeError):
    """The served CRD cannot hold what this operator reads and writes."""


def _paths(schema: dict[str, Any], prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each nested property schema with its dotted path (``[]`` for list items, ``{}`` for
    map values)."""
    for name, child in (schema.get("properties") or {}).items():
        yield f"{prefix}.{name}" if prefix else name, child
    items = schema.get("items")
    if isinstance(items, dict):
        yield f"{prefix}[]", items
    values = schema.get("additionalProperties")
    if isinstance(values, dict):
        yield f"{prefix}{{}}", values


def missing_properties(served: dict[str, Any], own: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of properties in ``own`` that ``served`` lacks (a missing parent is named
    once, not with each of its children). A served node that keeps unknown fields
    (``x-kubernetes-preserve-unknown-fields``) holds anything below it."""
    if served.get("x-kubernetes-preserve-unknown-fields"):
        return []
    found = dict(_paths(served, prefix))
    missing: list[str] = []
    for path, child in _paths(own, prefix):
        if path not in found:
            missing.append(path)
        else:
            missing.extend(missing_properties(found[path], child, path))
    return missing


def _schema_of(definition: dict[str, Any]) -> dict[str, Any] | None:
    """The openAPIV3Schema of the version this operator serves, or None if not served."""
    for version in definition.get("spec", {}).get("versions") or []:
        if version.get("name") == VERSION and version.get("served"):
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            return schema if isinstance(schema, dict) else {}
    return None


def check_definition(served: dict[str, Any]) -> None:
    """Raise ``OutdatedCrdError`` when ``served`` (the CRD as the API server returns it) cannot
    hold this operator's schema."""
    schema = _schema_of(served)
    if schema is None:
        raise OutdatedCrdError(
            f"the CustomResourceDefinition {CRD_NAME} does not serve version {VERSION}, which "
            f"this operator reads and writes; {FIX}"
        )
    own = _schema_of(crd())
    assert own is not None
    # Status first: its fields are the operator's own bookkeeping, lost without a word.
    missing = sorted(missing_properties(schema, own), key=lambda p: not p.startswith("status"))
    if missing:
        named = ", ".join(missing[:SHOWN]) + (
            f" and {len(missing) - SHOWN} more" if len(missing) > SHOWN else ""
        )
        raise OutdatedCrdError(
            f"the CustomResourceDefinition {CRD_NAME} is older than this operator: it has no "
            f"{named}. The API server would drop these fields from every write (status "
            f"bookkeeping lost, drivers restarted as if failing again); {FIX}"
        )


def check_served_crd(api: client.ApiClient) -> None:
    """Read the served CRD and check it (``OutdatedCrdError`` when it is missing or old)."""
    try:
        # Raw JSON: the client's model of a CRD is lossy (and refuses some valid ones).
        response: Any = client.ApiextensionsV1Api(api).read_custom_resource_definition(
            CRD_NAME, _preload_content=False
        )
    except ApiException as exc:
        if exc.status == 404:
            raise OutdatedCrdError(
                f"the CustomResourceDefinition {CRD_NAME} is not installed; {FIX}"
            ) from None
        raise
    check_definition(json.loads(response.data))
