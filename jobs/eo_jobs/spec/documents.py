"""From a file (or standard input) to the one YAML document of a pipeline, as kubectl reads it.

The YAML is read strictly: a repeated key is an error (PyYAML lets the later one win, so a
repeated ``guarantee`` or ``mode`` would silently change a pipeline), a file holds one
pipeline, and a date-looking scalar stays text, as it does on its way to the API server.
Problems name a field path in the wire spelling so that the user can find it in the YAML.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

STDIN = "-"
"""The file name that means standard input."""


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


class InputError(OSError):
    """The pipeline file cannot be read at all; the message says why and what to do."""


def source_name(path: Path | str) -> str:
    """How messages name a pipeline file (``<stdin>`` for ``-``)."""
    return "<stdin>" if str(path) == STDIN else str(path)


def read_input(path: Path | str) -> tuple[str, str]:
    """(name for messages, text) of a file, or of standard input for ``-``."""
    name = source_name(path)
    try:
        raw = sys.stdin.buffer.read() if str(path) == STDIN else Path(path).read_bytes()
    except FileNotFoundError as exc:
        raise InputError(f"{name}: no such file; check the path (or pass - for stdin)") from exc
    except IsADirectoryError as exc:
        raise InputError(
            f"{name} is a directory; give a pipeline YAML file (or - for standard input)"
        ) from exc
    except PermissionError as exc:
        raise InputError(
            f"{name}: permission denied; check the file's permissions or run as its owner"
        ) from exc
    except OSError as exc:
        raise InputError(f"{name}: cannot read it: {exc.strerror or exc}") from exc
    try:
        return name, raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{name} is not UTF-8 text (byte {exc.start} is 0x{raw[exc.start]:02x}); "
            "save it as UTF-8, as kubectl expects"
        ) from exc


class _Loader(yaml.SafeLoader):
    """Safe YAML with timestamps as text (they reach the API server as strings)."""

    def construct_yaml_timestamp(self, node: Node) -> Any:
        """A date or time stays the text it was written as."""
        return self.construct_yaml_str(node)


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _Loader.construct_yaml_timestamp)


def _duplicates(node: Node, path: str = "") -> list[SpecProblem]:
    """Every repeated mapping key under ``node``, named by its field path."""
    found: list[SpecProblem] = []
    if isinstance(node, MappingNode):
        seen: dict[str, Node] = {}
        for key, value in node.value:
            name = str(key.value) if not isinstance(key.value, list) else ""
            here = f"{path}.{name}" if path else name
            if name and name != "<<" and name in seen:
                first, again = seen[name].start_mark.line + 1, key.start_mark.line + 1
                found.append(
                    SpecProblem(
                        here,
                        f"duplicate key (lines {first} and {again}); YAML would keep only the "
                        "last one silently: remove one",
                    )
                )
            seen.setdefault(name, key)
            found.extend(_duplicates(value, here))
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            found.extend(_duplicates(item, f"{path}[{i}]"))
    return found


def _parse(text: str, name: str) -> Any:
    """The one non-empty document of ``text``, with its YAML problems as ``SpecError``."""
    try:
        loader = _Loader(text)
    except yaml.YAMLError as exc:  # a character YAML does not allow: no line and column
        what = " ".join(str(exc).split())
        raise SpecError([SpecProblem("(file)", f"not valid YAML: {what}")], name) from None
    try:
        nodes: list[Node] = []
        while loader.check_node():
            node = loader.get_node()
            if node is not None and not (node.tag.endswith(":null") and node.value in ("", "~")):
                nodes.append(node)
        if len(nodes) > 1:
            raise SpecError(
                [
                    SpecProblem(
                        "(file)",
                        f"{len(nodes)} YAML documents (the second starts at line "
                        f"{nodes[1].start_mark.line + 1}); eo reads one pipeline per file: "
                        "split the file",
                    )
                ],
                name,
            )
        if not nodes:
            raise SpecError([SpecProblem("(file)", "empty: no YAML document in it")], name)
        problems = _duplicates(nodes[0])
        if problems:
            raise SpecError(problems, name)
        return loader.construct_document(nodes[0])
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = " ".join(f"{exc.context or ''} {exc.problem or ''}".split())
        raise SpecError([SpecProblem("(file)", f"not valid YAML{where}: {what}")], name) from None
    finally:
        loader.dispose()


def one_document(text: str, name: str) -> Any:
    """The single YAML document of a pipeline file, refusing duplicates and extra documents."""
    document = _parse(text, name)
    kind = document.get("kind") if isinstance(document, dict) else None
    if kind != "ExactlyOncePipeline":
        hint = " (get one pipeline: kubectl get eop NAME -o yaml)" if kind == "List" else ""
        message = (
            "required field is missing: add kind: ExactlyOncePipeline"
            if kind is None
            else f"{kind!r} is not a pipeline: expected kind: ExactlyOncePipeline{hint}"
        )
        raise SpecError([SpecProblem("kind", message)], name)
    return document
