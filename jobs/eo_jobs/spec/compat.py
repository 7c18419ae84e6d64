"""CRD compatibility: what a new schema breaks for objects stored under an old one.

Objects already in etcd were validated against the released schema. A new CRD version that
removes a field, removes an enum value, changes a type or newly requires a field would make
those objects fail validation on their next update (or silently prune data), so the test suite
compares the generated CRD with the last released one (``crds/compat/``).
"""

from __future__ import annotations

from typing import Any


def _version_schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            return dict(entry["schema"]["openAPIV3Schema"])
    raise KeyError(f"CRD has no version {version}")


def _walk(old: dict[str, Any], new: dict[str, Any] | None, path: str, problems: list[str]) -> None:
    if new is None:
        problems.append(f"{path}: field removed")
        return
    if old.get("type") != new.get("type"):
        problems.append(f"{path}: type changed from {old.get('type')} to {new.get('type')}")
        return
    removed = [v for v in old.get("enum", []) if v not in new.get("enum", old.get("enum", []))]
    if removed:
        problems.append(f"{path}: enum values removed: {', '.join(map(str, removed))}")
    added_required = sorted(set(new.get("required", [])) - set(old.get("required", [])))
    if added_required:
        problems.append(f"{path}: newly required: {', '.join(added_required)}")
    for name, sub in (old.get("properties") or {}).items():
        _walk(sub, (new.get("properties") or {}).get(name), f"{path}.{name}", problems)
    if isinstance(old.get("items"), dict):
        _walk(
            old["items"],
            new.get("items") if isinstance(new.get("items"), dict) else None,
            f"{path}[]",
            problems,
        )


def incompatibilities(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Every change from ``old`` to ``new`` CRD that breaks stored objects (empty: compatible)."""
    problems: list[str] = []
    new_versions = {v["name"] for v in new["spec"]["versions"] if v.get("served")}
    for entry in old["spec"]["versions"]:
        if not entry.get("served"):
            continue
        if entry["name"] not in new_versions:
            problems.append(f"version {entry['name']}: no longer served")
            continue
        _walk(
            _version_schema(old, entry["name"]),
            _version_schema(new, entry["name"]),
            entry["name"],
            problems,
        )
    return problems
