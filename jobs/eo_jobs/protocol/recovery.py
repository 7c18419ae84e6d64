"""Recovery and sweep: resolve prepared transactions left behind, fence first.

Order matters: the fence is raised *before* anything is resolved. Resolving first would let a
live zombie decide a batch whose participants were just rolled back. After the fence, every
prepared transaction is decidable from the decision log alone: a winner of some decision is
committed, anything else is rolled back, and no older driver can add a decision any more.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from eo_jobs.protocol.control_api import ControlDatabase
from eo_jobs.protocol.gid import Gid, pipeline_prefix, sink_token
from eo_jobs.protocol.participants import DatabaseKey, InDoubt, ParticipantStore

Stores = Mapping[str, ParticipantStore] | Iterable[ParticipantStore]
"""Stores by sink name (each gid is finished through its own sink's store, i.e. its role), or
just stores (a gid is then finished through the store that listed it)."""


@dataclass
class Resolution:
    """What a resolve pass did."""

    committed: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    left: int = 0


@dataclass
class RecoveryReport:
    """Summary printed by ``eo recover`` and recorded by the operator."""

    pipeline: str
    fence_from: int | None
    fence_to: int
    committed: list[str]
    rolled_back: list[str]
    left: int
    seconds: float

    def as_json(self) -> dict[str, Any]:
        """The JSON shape printed by ``eo recover``."""
        return {
            "pipeline": self.pipeline,
            "fence": {"from": self.fence_from, "to": self.fence_to},
            "committed": self.committed,
            "rolled_back": self.rolled_back,
            "left": self.left,
            "seconds": round(self.seconds, 3),
        }


def distinct(stores: Stores) -> list[ParticipantStore]:
    """One store per database (several sinks may share one, as the same or another role).

    Databases are told apart by what their server reports (``ParticipantStore.database_key``;
    for PostgreSQL, ``identity.database_key``), never by the DSN's text: DSNs without a host
    (``service=``, ``hostaddr=``) would collapse two databases into one, and the other's
    prepared transactions would never be resolved.
    """
    seen: dict[tuple[str, DatabaseKey], ParticipantStore] = {}
    for store in stores.values() if isinstance(stores, Mapping) else stores:
        seen.setdefault((type(store).__name__, store.database_key()), store)
    return list(seen.values())


def finisher(stores: Stores, item: InDoubt, lister: ParticipantStore) -> ParticipantStore:
    """The store that may finish ``item``: its own sink's (PostgreSQL lets only the role that
    prepared a transaction, or a superuser, finish it), else the one that listed it."""
    if isinstance(stores, Mapping):
        for name, store in stores.items():
            if sink_token(name) == item.parsed.sink:
                return store
    return lister


def resolve(
    control: ControlDatabase,
    stores: Stores,
    pipeline: str,
    *,
    select: Callable[[Gid], bool] = lambda _gid: True,
) -> Resolution:
    """Commit decided winners and roll back everything else among the selected gids.

    Only safe for gids that can no longer be decided: below the fence, or of a driver known
    to be dead or known to be between batches (the caller's ``select`` says which).
    """
    result = Resolution()
    prefix = pipeline_prefix(pipeline)
    for store in distinct(stores):
        pending = [x for x in store.in_doubt(prefix) if select(x.parsed)]
        winners = control.winners(
            pipeline, (x.gid for x in pending), (x.parsed.batch for x in pending)
        )
        for item in pending:
            if item.gid in winners:
                finisher(stores, item, store).commit(item.gid)
                result.committed.append(item.gid)
            else:
                finisher(stores, item, store).rollback(item.gid)
                result.rolled_back.append(item.gid)
        result.left += len([x for x in store.in_doubt(prefix) if select(x.parsed)])
    return result


def recover(
    control: ControlDatabase,
    stores: Stores,
    pipeline: str,
    epoch: int,
    owner: str | None = None,
    *,
    adopt_from: str | None = None,
) -> RecoveryReport:
    """Raise the fence to ``epoch`` (never lower), then resolve what older epochs left.

    ``owner`` and ``adopt_from`` claim the fence as ``ControlStore.raise_fence`` says; a claim
    another writer holds is refused before anything is resolved.

    Prepared transactions of ``epoch`` itself (or newer) are left alone: they belong to the
    driver that was, or is about to be, launched with it. Run it with a new epoch to clear
    everything. ``left`` counts every prepared transaction of the pipeline still there.
    """
    started = time.monotonic()
    if not isinstance(stores, Mapping):
        stores = list(stores)
    control.ensure_schema()
    for store in distinct(stores):
        store.ensure_schema()
    change = control.raise_fence(pipeline, epoch, owner, adopt_from=adopt_from)
    done = resolve(control, stores, pipeline, select=lambda gid: gid.epoch < epoch)
    prefix = pipeline_prefix(pipeline)
    left = sum(len(store.in_doubt(prefix)) for store in distinct(stores))
    return RecoveryReport(
        pipeline=pipeline,
        fence_from=change.previous,
        fence_to=change.current,
        committed=done.committed,
        rolled_back=done.rolled_back,
        left=left,
        seconds=time.monotonic() - started,
    )


@dataclass(frozen=True)
class Kept:
    """A prepared transaction the sweep left alone, and why."""

    gid: str
    sink: str
    epoch: int
    batch: int
    reason: str


@dataclass
class SweepReport(Resolution):
    """A resolve pass below the fence, plus what it left and why (printed by ``eo sweep``)."""

    fence: int | None = None
    kept: list[Kept] = field(default_factory=list)
    note: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The JSON shape printed by ``eo sweep``."""
        shape: dict[str, Any] = {
            "fence": self.fence,
            "committed": self.committed,
            "rolled_back": self.rolled_back,
            "left": self.left,
            "kept": [vars(k) for k in self.kept],
        }
        if self.note is not None:
            shape["note"] = self.note
        return shape


def sweep(control: ControlDatabase, stores: Stores, pipeline: str) -> SweepReport:
    """Resolve prepared transactions whose epoch is below the fence; safe at any time.

    A zombie can still PREPARE after a recovery (Kubernetes cannot promise an old pod on a
    lost node is dead), and such a transaction holds locks and blocks VACUUM until someone
    ends it. The live epoch's transactions are never touched here: they are reported as kept,
    with the reason, so a person knows what is not the sweep's to end. Creates nothing: a
    control database the pipeline never ran against is reported, not initialised.
    """
    if not isinstance(stores, Mapping):
        stores = list(stores)
    fence = control.fence_epoch(pipeline) if control.has_control_tables() else None
    if fence is None:
        return SweepReport(
            kept=_kept(stores, pipeline, lambda _gid: NO_FENCE_REASON),
            note=f"the control database has no fence for {pipeline}: the pipeline never ran "
            "against it, so nothing can be decided or swept there",
        )
    done = resolve(control, stores, pipeline, select=lambda gid: gid.epoch < fence)
    return SweepReport(
        committed=done.committed,
        rolled_back=done.rolled_back,
        left=done.left,
        fence=fence,
        kept=_kept(stores, pipeline, lambda gid: _live_reason(gid, fence)),
    )


NO_FENCE_REASON = (
    "no fence for the pipeline in the control database: nothing can decide it (is this the "
    "control database the pipeline ran against?)"
)


def _live_reason(gid: Gid, fence: int) -> str | None:
    """Why the sweep leaves ``gid``; ``None`` below the fence (those it resolves)."""
    if gid.epoch < fence:
        return None
    if gid.epoch == fence:
        return (
            f"epoch {gid.epoch} is the live epoch (fence {fence}): its driver may still decide "
            f"batch {gid.batch}; once that driver is known dead, `eo recover --epoch "
            f"{fence + 1}` resolves it"
        )
    return (
        f"epoch {gid.epoch} is above the fence ({fence}): a driver launched with it may still "
        f"decide batch {gid.batch}"
    )


def _kept(stores: Stores, pipeline: str, reason: Callable[[Gid], str | None]) -> list[Kept]:
    """Every prepared transaction of the pipeline ``reason`` gives a reason to leave."""
    names = {sink_token(n): n for n in stores} if isinstance(stores, Mapping) else {}
    kept: list[Kept] = []
    for store in distinct(stores):
        for item in store.in_doubt(pipeline_prefix(pipeline)):
            why = reason(item.parsed)
            if why is not None:
                sink = names.get(item.parsed.sink, item.parsed.sink)
                kept.append(Kept(item.gid, sink, item.parsed.epoch, item.parsed.batch, why))
    return kept
