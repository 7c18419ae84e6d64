"""Reading a pipeline from YAML and turning validation failures into messages for people.

Every problem is reported with its field path in the wire spelling (``spec.sinks[0].postgres
.keyColumns``) so that the user can find it in the YAML they wrote, and all problems are
reported at once rather than one per attempt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from eo_jobs.spec.models import FieldError, Pipeline


@dataclass(frozen=True)
class SpecProblem:
    """One invalid field."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class SpecError(ValueError):
    """The pipeline is invalid; ``problems`` lists every field at fault."""

    def __init__(self, problems: Sequence[SpecProblem], source: str = "pipeline") -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{source} is invalid:\n{lines}")


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
        elif err["type"] == "string_pattern_mismatch":
            message = _pattern_hint(str(loc[-1]) if loc else "", err.get("input"), err["msg"])
        problems.append(SpecProblem(_format_loc(loc), message))
    return problems


def _pattern_hint(field: str, value: Any, default: str) -> str:
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


def load_pipeline(path: Path) -> Pipeline:
    """Read one pipeline from a YAML file (the first ExactlyOncePipeline document in it)."""
    text = path.read_text(encoding="utf-8")
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise SpecError([SpecProblem("(file)", f"not valid YAML: {exc}")], str(path)) from None
    for doc in documents:
        if isinstance(doc, Mapping) and doc.get("kind") == "ExactlyOncePipeline":
            return parse_pipeline(doc, str(path))
    raise SpecError(
        [SpecProblem("kind", "no document with kind: ExactlyOncePipeline in this file")],
        str(path),
    )
