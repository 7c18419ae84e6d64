"""The operator's view of a pipeline's sinks: credentials, recovery, sweep and health.

DSNs come from the Secrets the spec names (the operator never stores them). Recovery and the
sweep are the protocol's own functions, so the operator, ``eo recover`` and a driver at
startup resolve prepared transactions with exactly the same code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import psycopg
from psycopg.conninfo import conninfo_to_dict

from eo_jobs.protocol import databases
from eo_jobs.protocol.gid import pipeline_prefix
from eo_jobs.protocol.mysql_xa import MySqlDsn
from eo_jobs.protocol.recovery import RecoveryReport, Resolution, distinct, recover, sweep
from eo_jobs.sinks.postgres.binding import Bound, bind
from eo_jobs.spec.models import CredentialRef, Pipeline
from eo_operator.blockers import SecretKeyMissingError
from eo_operator.kube import Kube
from eo_operator.metrics import SinkHealth

FAILURE_WINDOW_SECONDS = 900.0


@dataclass(frozen=True)
class Health:
    """Checkpoint health read from the decision log and pg_prepared_xacts."""

    last_batch_id: int | None
    last_commit_time: datetime | None
    checkpoint_seconds: float | None
    commit_seconds: float | None
    new_checkpoint_seconds: list[float]
    new_commit_seconds: list[float]
    decided: int
    failed: int
    failure_rate: float | None
    in_doubt: int
    oldest_in_doubt_seconds: float | None
    prepared_by_sink: dict[str, SinkHealth] = field(default_factory=dict)
    last_epoch: int | None = None
    """The epoch of the driver that decided the last batch."""


def database_label(dsn: str) -> str:
    """``host:port`` of the server a DSN names (libpq's defaults filled in), for metrics.

    Prepared transactions and their cap are per server, so this groups every sink that shares
    one ``max_prepared_transactions`` (MySQL: one server's InnoDB undo slots). Only the
    address: never the user or the password. A DSN that does not parse gets "" (no label: the
    alert then falls back to one per sink).
    """
    try:
        if databases.kind(dsn) == "mysql":
            target = MySqlDsn.parse(dsn)
            return f"{target.host}:{target.port}"
        params = conninfo_to_dict(dsn)
    except (psycopg.ProgrammingError, ValueError):
        return ""
    host = params.get("host") or params.get("hostaddr") or "localhost"
    return f"{host}:{params.get('port') or 5432}"


def secret_dsn(
    kube: Kube, namespace: str, name: str, ref: CredentialRef, *, remembered: bool = False
) -> str:
    """The DSN a credential reference names, read from its Secret (or, with ``remembered``,
    the value last read when the Secret is gone: ``Kube.secret_value``)."""
    secret = ref.secret_key_ref
    if secret is None:
        raise KeyError(f"{name}: dsn must be a secretKeyRef on Kubernetes")
    try:
        return kube.secret_value(namespace, secret.name, secret.key, remembered=remembered)
    except KeyError:
        raise SecretKeyMissingError(namespace, secret.name, secret.key) from None


def dsns_from_secrets(
    kube: Kube, pipeline: Pipeline, *, remembered: bool = False
) -> dict[str, str]:
    """Every sink's DSN, read from its Secret (``remembered``: see ``secret_dsn``)."""
    namespace = pipeline.metadata.namespace
    return {
        sink.name: secret_dsn(
            kube, namespace, f"sink {sink.name}", sink.target.dsn, remembered=remembered
        )
        for sink in pipeline.spec.sinks
    }


class PipelineSinks:
    """Protocol endpoints of one pipeline, bound to its databases.

    Before the first recovery or sweep the binding is claimed (``Bound.claim``): the control
    database is recorded in every participant database, a moved one is refused, and databases
    of sinks removed from the spec are added so what they hold prepared is resolved too.
    """

    def __init__(
        self, pipeline: Pipeline, dsns: dict[str, str], kube: Kube, *, remembered: bool = False
    ) -> None:
        self.pipeline = pipeline
        self.kube = kube
        self.remembered = remembered
        namespace = pipeline.metadata.namespace
        control = pipeline.spec.control
        self.bound: Bound = bind(
            pipeline,
            dsns,
            secret_dsn(kube, namespace, "spec.control", control.dsn, remembered=remembered)
            if control
            else None,
        )
        self._claimed = False

    def close(self) -> None:
        """Close every connection."""
        self.bound.close()

    def _claim(self) -> None:
        if not self._claimed:
            namespace = self.pipeline.metadata.namespace
            self.bound.claim(
                lambda sink, ref: secret_dsn(
                    self.kube, namespace, sink, ref, remembered=self.remembered
                )
            )
            self._claimed = True

    def recover(self, epoch: int, owner: str | None = None) -> RecoveryReport:
        """Fence to ``epoch`` (claimed for ``owner``, if given) and resolve everything below."""
        self._claim()
        return recover(self.bound.control, self.bound.stores, self.bound.pipeline, epoch, owner)

    def sweep(self) -> Resolution:
        """Resolve prepared transactions below the fence (zombies' late prepares)."""
        self._claim()
        return sweep(self.bound.control, self.bound.stores, self.bound.pipeline)

    def health(self, seen_until: datetime | None) -> Health:
        """Health figures; durations of batches decided after ``seen_until`` for histograms."""
        control = self.bound.control
        recent = control.recent_decisions(self.bound.pipeline, limit=100)
        done = [d for d in recent if d.committed_at is not None]
        fresh = [d for d in done if seen_until is None or d.decided_at > seen_until]
        decided, failed = control.attempts_since(self.bound.pipeline, FAILURE_WINDOW_SECONDS)
        now = datetime.now(UTC)
        prefix = pipeline_prefix(self.bound.pipeline)
        ages: list[float] = []
        for store in distinct(self.bound.stores):
            ages.extend((now - x.prepared_at).total_seconds() for x in store.in_doubt(prefix))
        last = recent[0] if recent else None
        last_done = done[0] if done else None
        return Health(
            last_batch_id=last.batch_id if last else None,
            last_commit_time=last.decided_at if last else None,
            last_epoch=last.epoch if last else None,
            checkpoint_seconds=last_done.checkpoint_seconds if last_done else None,
            commit_seconds=(last_done.commit_ms or 0.0) / 1000.0 if last_done else None,
            new_checkpoint_seconds=[
                d.checkpoint_seconds for d in fresh if d.checkpoint_seconds is not None
            ],
            new_commit_seconds=[(d.commit_ms or 0.0) / 1000.0 for d in fresh],
            decided=decided,
            failed=failed,
            failure_rate=failed / (decided + failed) if decided + failed else None,
            in_doubt=len(ages),
            oldest_in_doubt_seconds=max(ages) if ages else None,
            prepared_by_sink={
                name: SinkHealth(*store.server_limits(), database_label(self.bound.dsns[name]))
                for name, store in self.bound.stores.items()
            },
        )
