"""Spark's checkpoint files the audit reads, from a local folder, without Spark.

The driver reads the same files through ``runtime.checkpoint`` (which may go through the Spark
session's Hadoop FileSystem for object stores); the auditor runs in the operator, which has no
Spark, so it reads only a checkpoint on a file system it can see (a shared volume, a path on
the same machine for ``eo audit``). The format is Spark's own: ``metadata`` (the query id),
``offsets/N`` (a version line, a metadata line, then one line per source), and the file
source's log ``sources/<i>/K`` (a version line, then one JSON entry per file), where every
``compactInterval``-th entry is ``K.compact`` holding every entry so far and older entries may
be deleted once compacted.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

_ENTRY = re.compile(r"^(\d+)(\.compact)?$")


class UnreadableCheckpointError(RuntimeError):
    """A checkpoint file the audit needs is missing or not in Spark's format."""


def local_folder(location: str) -> Path | None:
    """The folder a location names on this machine (a path or ``file://``), or None."""
    if location.startswith("file://"):
        return Path(location[len("file://") :])
    if "://" in location:
        return None
    return Path(location)


class LocalCheckpoint:
    """Reads a checkpoint folder: query id, offsets per batch, the file source's log."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def query_id(self) -> str:
        """The streaming query id in ``metadata``."""
        path = self.folder / "metadata"
        if not path.is_file():
            raise UnreadableCheckpointError(f"no metadata file in checkpoint {self.folder}")
        return str(json.loads(path.read_text(encoding="utf-8").splitlines()[0])["id"])

    def offsets(self, batch_id: int) -> list[Any] | None:
        """Source offsets Spark logged for ``batch_id``, as the decision records them."""
        path = self.folder / "offsets" / str(batch_id)
        if not path.is_file():
            return None
        lines = path.read_text(encoding="utf-8").splitlines()[2:]
        return [json.loads(line) if line not in ("", "-") else None for line in lines]

    def source_entries(self, source: int, up_to: int) -> dict[int, list[str]]:
        """File source log entries 0..``up_to`` (inclusive): entry -> the file paths in it.

        Reads the newest compacted entry at or below ``up_to`` and every entry after it: a
        compacted entry holds all earlier ones, each with its own ``batchId``.
        """
        folder = self.folder / "sources" / str(source)
        if not folder.is_dir():
            raise UnreadableCheckpointError(f"no file source log at {folder}")
        plain: set[int] = set()
        compact: list[int] = []
        for child in folder.iterdir():
            found = _ENTRY.match(child.name)
            if found and found.group(2):
                compact.append(int(found.group(1)))
            elif found:
                plain.add(int(found.group(1)))
        entries: dict[int, list[str]] = {}
        base = max((k for k in compact if k <= up_to), default=None)
        if base is not None:
            for item in _entries(folder / f"{base}.compact"):
                entries.setdefault(int(item["batchId"]), []).append(str(item["path"]))
        for entry in range((-1 if base is None else base) + 1, up_to + 1):
            if entry not in plain:
                raise UnreadableCheckpointError(
                    f"file source log entry {entry} is missing from {folder} (neither {entry} nor "
                    "a compacted entry after it)"
                )
            entries[entry] = [str(item["path"]) for item in _entries(folder / str(entry))]
        return entries


def _entries(path: Path) -> list[dict[str, Any]]:
    """The JSON entries of one source log file (after its version line)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or not lines[0].startswith("v"):
        raise UnreadableCheckpointError(f"{path} is not a Spark file source log entry")
    return [json.loads(line) for line in lines[1:] if line.strip()]
