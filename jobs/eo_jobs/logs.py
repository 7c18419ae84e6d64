"""One log format for the driver and the operator: JSON lines, or text for a terminal.

Every record carries the pipeline, its namespace, the driver's epoch and the batch it was
logged in (when known), as fields a log pipeline (Loki, Elasticsearch) can filter on, not as
words inside the message. The operator's kopf records name their object in ``k8s_ref``; that is
read too. ``EO_LOG_FORMAT`` (or ``--log-format``) chooses ``json`` (default) or ``text``.

The driver's ``{"event": ...}`` lines on stdout (batch, progress, replay) are a separate,
stable event stream for tools (the demo, the benchmarks, the chaos harness read it): they are
JSON whatever the log format, start with their ``event`` key, and carry the same context fields
as the log records, so a log pipeline filters both by pipeline, namespace, epoch and batch.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

FORMATS = ("json", "text")
FORMAT_ENV = "EO_LOG_FORMAT"
LEVEL_ENV = "EO_LOG_LEVEL"
FIELDS = ("pipeline", "namespace", "epoch", "batch")
KOPF_RECORD_ATTRS = ("settings", "k8s_skip", "k8s_ref")

_context: dict[str, Any] = {}
_EVENT_LOCK = threading.Lock()
"""Process-wide: a driver runs one pipeline at one epoch, one batch at a time, and its batch
callback runs on a thread Spark (py4j) chooses, where a contextvar set elsewhere is not seen."""


def set_context(**fields: Any) -> None:
    """Set (or, with None, clear) context fields added to every later record."""
    for key, value in fields.items():
        if key not in FIELDS:
            raise ValueError(f"unknown log field {key!r}; known: {', '.join(FIELDS)}")
        if value is None:
            _context.pop(key, None)
        else:
            _context[key] = value


def event(name: str, **fields: Any) -> None:
    """Print one line of the driver's event stream: ``{"event": name, **fields, **context}``.

    A field given here wins over the context's (a replayed batch names its own batch).
    """
    line = {"event": name, **fields}
    for key, value in _context.items():
        line.setdefault(key, value)
    text = json.dumps(line) + "\n"
    # One write under a lock: print() writes the text and its newline separately, and two
    # threads (phase 2's and Spark's listener) printing at once joined two events on one line.
    with _EVENT_LOCK:
        sys.stdout.write(text)
        sys.stdout.flush()


class _Context(logging.Filter):
    """Adds the context fields (and kopf's object reference) to each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        ref = getattr(record, "k8s_ref", None)
        if isinstance(ref, dict):
            record.pipeline = ref.get("name")
            record.namespace = ref.get("namespace")
        for key, value in _context.items():
            if getattr(record, key, None) is None:
                setattr(record, key, value)
        return True


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to ``sys.stderr`` as it is when a record is emitted (as logging's last resort
    does), so a caller that redirects or captures stderr later still gets the records."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


class _Text(logging.Formatter):
    """``time level logger [ns/pipeline e3 b17]: message`` for people at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        where = []
        pipeline, namespace = getattr(record, "pipeline", None), getattr(record, "namespace", None)
        epoch, batch = getattr(record, "epoch", None), getattr(record, "batch", None)
        if pipeline:
            where.append(f"{namespace}/{pipeline}" if namespace else str(pipeline))
        if epoch is not None:
            where.append(f"e{epoch}")
        if batch is not None:
            where.append(f"b{batch}")
        record.where = f" [{' '.join(where)}]" if where else ""
        return super().format(record)


def configure(fmt: str | None = None, level: str | None = None) -> str:
    """Install the format on the root logger; returns it.

    ``fmt`` (the ``--log-format`` option) wins over ``$EO_LOG_FORMAT``. The handler an earlier
    call installed is replaced, so the last call decides; handlers others installed (a test
    runner's capture) are kept.
    """
    chosen = (fmt or os.environ.get(FORMAT_ENV) or "json").lower()
    if chosen not in FORMATS:
        source = "--log-format" if fmt else FORMAT_ENV
        raise ValueError(
            f"unknown log format {chosen!r} ({source}): use one of {', '.join(FORMATS)}"
        )
    handler = _Stderr(sys.stderr)
    handler.addFilter(_Context())
    if chosen == "json":
        handler.setFormatter(
            JsonFormatter(
                ["levelname", "name", "message"],
                rename_fields={"levelname": "level", "name": "logger"},
                timestamp="time",  # ISO 8601, UTC, microseconds
                # kopf's per-object records carry its OperatorSettings (queues inside: not
                # serializable, the record would be lost) and its own bookkeeping; the object
                # they name is already in pipeline and namespace.
                reserved_attrs=[*RESERVED_ATTRS, *KOPF_RECORD_ATTRS],
            )
        )
    else:
        handler.setFormatter(_Text("%(asctime)s %(levelname)s %(name)s%(where)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        if isinstance(old, _Stderr):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel((level or os.environ.get(LEVEL_ENV) or "INFO").upper())
    logging.getLogger("py4j").setLevel(logging.WARNING)
    return chosen
