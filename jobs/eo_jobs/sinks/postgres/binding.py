"""Bind a pipeline spec to its databases: the control store and one store per sink.

The control tables (fence, decisions) live in the first sink's database: the coordinator.
Every sink gets its own ``PreparedTransactions`` store, so prepared transactions are found and
finished in the database where they were prepared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from eo_jobs.protocol.control import ControlStore
from eo_jobs.protocol.xa import PreparedTransactions
from eo_jobs.sinks.postgres.credentials import resolve_dsn
from eo_jobs.spec.models import Pipeline


@dataclass
class Bound:
    """A pipeline's protocol endpoints."""

    pipeline: str
    control: ControlStore
    stores: dict[str, PreparedTransactions]
    dsns: dict[str, str]

    def close(self) -> None:
        """Close every connection."""
        self.control.close()
        for store in self.stores.values():
            store.close()


def sink_dsns(pipeline: Pipeline, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """DSN of every sink, resolved from the environment."""
    return {s.name: resolve_dsn(s.name, s.postgres.dsn, environ) for s in pipeline.spec.sinks}


def bind(pipeline: Pipeline, dsns: Mapping[str, str]) -> Bound:
    """Endpoints for ``pipeline`` given each sink's DSN."""
    first = pipeline.spec.sinks[0].name
    return Bound(
        pipeline=pipeline.key,
        control=ControlStore(dsns[first]),
        stores={name: PreparedTransactions(dsn) for name, dsn in dsns.items()},
        dsns=dict(dsns),
    )
