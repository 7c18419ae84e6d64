"""Bind a pipeline spec to its databases: the control store and one store per sink.

The control tables (fence, decisions) live in ``spec.control``'s database, or, when it is not
set, in the first sink's database. Every sink gets its own store of its database's kind
(``protocol.databases``: PostgreSQL or MySQL/MariaDB), so prepared transactions are found and
finished in the database where they were prepared.
``Bound.claim`` records the control database in every participant database (and refuses a
control database that moved, see ``protocol.registry``) and adds the stores of databases that
held participants of the pipeline under an earlier spec, so recovery and the sweep still
resolve what was left there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from eo_jobs.protocol import registry
from eo_jobs.protocol.control_api import ControlDatabase
from eo_jobs.protocol.databases import control_store, participant_store
from eo_jobs.protocol.participants import ParticipantStore
from eo_jobs.sinks.postgres.credentials import (
    CONTROL_ENV,
    MissingCredentialError,
    resolve_dsn,
)
from eo_jobs.spec.models import CredentialRef, Pipeline

log = logging.getLogger("eo.binding")


@dataclass
class Bound:
    """A pipeline's protocol endpoints."""

    pipeline: str
    control: ControlDatabase
    stores: dict[str, ParticipantStore]
    dsns: dict[str, str]
    refs: dict[str, CredentialRef] = field(default_factory=dict)
    unreachable: list[str] = field(default_factory=list)
    """Recorded participant databases no reference reaches any more (for reports)."""

    def claim(self, resolve: Callable[[str, CredentialRef], str] | None = None) -> None:
        """Record the control database everywhere; add stores of retired participant databases.

        Raises ``registry.ControlMovedError`` when a participant database names another control
        database. A database recorded under a sink that is no longer in the spec is reached
        through its recorded credential reference when it still resolves here (``resolve``,
        default: from this process's environment, as the driver and the CLI do).
        """
        resolve = resolve or resolve_dsn
        self.control.ensure_schema()
        for store in self.stores.values():
            store.ensure_schema()
        registry.claim(
            self.control,
            {
                name: (self.stores[name], ref.model_dump(by_alias=True, exclude_none=True))
                for name, ref in self.refs.items()
            },
            self.pipeline,
        )
        for old in registry.recorded(self.control, self.pipeline):
            if old.sink in self.stores:
                continue
            try:
                dsn = resolve(old.sink, CredentialRef.model_validate(old.dsn_ref))
            except (MissingCredentialError, LookupError) as exc:
                self.unreachable.append(f"{old.label} (removed sink {old.sink}): {exc}")
                log.warning("participant database %s is not reachable: %s", old.label, exc)
                continue
            self.stores[old.sink] = participant_store(dsn)
            self.dsns[old.sink] = dsn

    def close(self) -> None:
        """Close every connection."""
        self.control.close()
        for store in self.stores.values():
            store.close()


def sink_dsns(pipeline: Pipeline, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """DSN of every sink, resolved from the environment."""
    return {s.name: resolve_dsn(s.name, s.target.dsn, environ) for s in pipeline.spec.sinks}


def control_dsn(
    pipeline: Pipeline, dsns: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> str:
    """DSN of the control database: ``spec.control``, else the first sink's."""
    control = pipeline.spec.control
    if control is None:
        return dsns[pipeline.spec.sinks[0].name]
    return resolve_dsn("control", control.dsn, environ, variable=CONTROL_ENV)


def bind(pipeline: Pipeline, dsns: Mapping[str, str], control: str | None = None) -> Bound:
    """Endpoints for ``pipeline`` given each sink's DSN (and the control DSN, if separate).

    Each sink's store, and the control store, is its database kind's (``protocol.databases``:
    PostgreSQL or MySQL/MariaDB), so a pipeline whose only database is MySQL needs no PostgreSQL.
    """
    control = control or control_dsn(pipeline, dsns)
    return Bound(
        pipeline=pipeline.key,
        control=control_store(control),
        stores={name: participant_store(dsn) for name, dsn in dsns.items()},
        dsns=dict(dsns),
        refs={s.name: s.target.dsn for s in pipeline.spec.sinks},
    )
