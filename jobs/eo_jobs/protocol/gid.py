"""Global transaction ids (gids) for PREPARE TRANSACTION.

A gid names one participant: pipeline, streaming query, sink, epoch, batch, task index and task
attempt. It must be deterministic (no timestamps: a replay must be able to find what an earlier
attempt prepared), parseable back (recovery decides from the gid alone which batch and epoch a
prepared transaction belongs to), and shorter than PostgreSQL's 200-byte limit even for long
names: names are shortened to a readable stem plus a hash of the full name, so two long names
that share a prefix still get different gids.

Format: ``eo1:<pipeline>:<query>:<sink>:<epoch>:<batch>:<task>:<attempt>``.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass

PREFIX = "eo1"
MAX_GID_BYTES = 199
_UNSAFE = re.compile(r"[^a-z0-9-]+")


def _token(name: str, stem: int) -> str:
    """A ``[a-z0-9-]`` token: readable stem of ``name`` plus 8 hex of its SHA-256."""
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    readable = _UNSAFE.sub("-", name.lower()).strip("-")[:stem].strip("-")
    return f"{readable}-{digest}" if readable else digest


def pipeline_token(pipeline: str) -> str:
    """The gid component of a pipeline key (``namespace/name``)."""
    return _token(pipeline, 40)


def sink_token(sink: str) -> str:
    """The gid component of a sink name."""
    return _token(sink, 24)


def query_token(query_id: str) -> str:
    """The gid component of a streaming query id (a UUID; any string is accepted)."""
    try:
        return uuid.UUID(query_id).hex[:16]
    except ValueError:
        return hashlib.sha256(query_id.encode()).hexdigest()[:16]


def pipeline_prefix(pipeline: str) -> str:
    """Prefix shared by every gid of a pipeline (for ``LIKE prefix%`` scans)."""
    return f"{PREFIX}:{pipeline_token(pipeline)}:"


@dataclass(frozen=True, order=True)
class Gid:
    """A parsed gid. ``pipeline``, ``query`` and ``sink`` are the tokens, not the full names."""

    pipeline: str
    query: str
    sink: str
    epoch: int
    batch: int
    task: int
    attempt: int

    @classmethod
    def build(
        cls,
        *,
        pipeline: str,
        query_id: str,
        sink: str,
        epoch: int,
        batch: int,
        task: int,
        attempt: int,
    ) -> Gid:
        """Make the gid of one participant from full names."""
        if min(epoch, batch, task, attempt) < 0 or epoch == 0:
            raise ValueError("epoch must be positive; batch, task and attempt non-negative")
        return cls(
            pipeline_token(pipeline),
            query_token(query_id),
            sink_token(sink),
            epoch,
            batch,
            task,
            attempt,
        )

    def __str__(self) -> str:
        text = (
            f"{PREFIX}:{self.pipeline}:{self.query}:{self.sink}:"
            f"{self.epoch}:{self.batch}:{self.task}:{self.attempt}"
        )
        if len(text.encode()) > MAX_GID_BYTES:
            raise ValueError(f"gid longer than {MAX_GID_BYTES} bytes: {text}")
        return text

    @classmethod
    def parse(cls, text: str) -> Gid | None:
        """Parse a gid; ``None`` when it is not one of ours (other software's prepared xacts)."""
        parts = text.split(":")
        if len(parts) != 8 or parts[0] != PREFIX:
            return None
        try:
            epoch, batch, task, attempt = (int(p) for p in parts[4:])
        except ValueError:
            return None
        return cls(parts[1], parts[2], parts[3], epoch, batch, task, attempt)
