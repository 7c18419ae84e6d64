"""Reading a pipeline from YAML and turning validation failures into messages for people.

Every problem is reported with its field path in the wire spelling (``spec.sinks[0].postgres
.keyColumns``) so that the user can find it in the YAML they wrote, and all problems are
reported at once rather than one per attempt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from eo_jobs.spec.documents import InputError, SpecError, SpecProblem, one_document, read_input
from eo_jobs.spec.models import NAME_MAX_LENGTH, FieldError, Pipeline

__all__ = [
    "InputError",
    "SpecError",
    "SpecProblem",
    "load_pipeline",
    "parse_pipeline",
    "problems_from",
]


def _format_loc(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("function-after", "function-before") or part.startswith("function-"):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


_FRIENDLY = {
    "extra_forbidden": "unknown field; check its spelling against `kubectl explain eop.spec`",
    "missing": "required field is missing",
}


def problems_from(error: ValidationError) -> list[SpecProblem]:
    """Translate pydantic errors into field-named problems."""
    problems: list[SpecProblem] = []
    for err in error.errors(include_url=False):
        loc: list[int | str] = list(err["loc"])
        message = _FRIENDLY.get(err["type"], err["msg"])
        ctx = err.get("ctx") or {}
        cause = ctx.get("error")
        if isinstance(cause, FieldError):
            loc.extend(cause.field.replace("[", ".[").split("."))
            loc = [int(p[1:-1]) if isinstance(p, str) and p.startswith("[") else p for p in loc]
            loc = [p for p in loc if p != ""]
            message = str(cause)
        elif err["type"] == "literal_error" or err["type"] == "enum":
            message = f"{err['msg']} (got {err.get('input')!r})"
        elif err["type"] in _TYPES:
            message = _type_hint(str(loc[-1]), _TYPES[err["type"]], err.get("input"))
        elif err["type"] == "string_pattern_mismatch":
            message = _pattern_hint(_format_loc(loc), err.get("input"), err["msg"])
        elif err["type"] == "string_too_long" and _format_loc(loc) == "metadata.name":
            message = (
                f"{len(err.get('input') or '')} characters; at most {NAME_MAX_LENGTH}: the "
                "operator labels the pipeline's pods and services with it, and a label value "
                "holds 63: choose a shorter name"
            )
        problems.append(SpecProblem(_format_loc(loc), message))
    return problems


_TYPES = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
}
_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
_NAMES.update({list: "a list", dict: "a mapping", type(None): "null"})


def _type_hint(field: str, expected: str, value: Any) -> str:
    """A scalar of the wrong JSON type, and how to write the right one in YAML."""
    got = _NAMES.get(type(value), type(value).__name__)
    if isinstance(value, str) and expected == "a boolean":
        return f"{value!r} is a string; write true or false without quotes"
    if isinstance(value, str) and expected in ("an integer", "a number"):
        example = value if value.strip().lstrip("-").replace(".", "", 1).isdigit() else "10"
        return f"{value!r} is a string; write {expected} without quotes, e.g. {field}: {example}"
    return f"expected {expected}, got {got} {value!r}"


def _pattern_hint(path: str, value: Any, default: str) -> str:
    field = path.rsplit(".", 1)[-1]
    if path == "metadata.name":
        return (
            f"{value!r} is not a valid name: lowercase letters, digits, '-' and '.', starting "
            "and ending with a letter or digit, e.g. orders-ledger"
        )
    if path == "metadata.namespace":
        return f"{value!r} is not a DNS label: lowercase letters, digits and '-', e.g. payments"
    if field == "table":
        return (
            f"{value!r} is not schema.table; write the table with its schema, "
            "e.g. public.orders (letters, digits and _ only)"
        )
    if field == "name":
        return f"{value!r} must be lowercase letters, digits and '-', starting with a letter"
    if field in ("memory",):
        return f"{value!r} is not a Spark memory size such as 512m or 2g"
    return f"{value!r}: {default}"


def parse_pipeline(document: Mapping[str, Any], source: str = "pipeline") -> Pipeline:
    """Validate a decoded document as an ExactlyOncePipeline, raising ``SpecError``."""
    try:
        return Pipeline.model_validate(document)
    except ValidationError as exc:
        raise SpecError(problems_from(exc), source) from None


def load_pipeline(path: Path | str) -> Pipeline:
    """Read the one pipeline of a YAML file (``-``: standard input).

    Raises ``InputError`` when the file cannot be read and ``SpecError`` when it does not hold
    exactly one valid ExactlyOncePipeline document.
    """
    name, text = read_input(path)
    return parse_pipeline(one_document(text, name), name)
