"""Recovery and sweep: resolve prepared transactions left behind, fence first.

Order matters: the fence is raised *before* anything is resolved. Resolving first would let a
live zombie decide a batch whose participants were just rolled back. After the fence, every
prepared transaction is decidable from the decision log alone: a winner of some decision is
committed, anything else is rolled back, and no older driver can add a decision any more.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from eo_jobs.protocol.control import ControlStore
from eo_jobs.protocol.gid import Gid, pipeline_prefix
from eo_jobs.protocol.xa import PreparedTransactions


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


def distinct(stores: Iterable[PreparedTransactions]) -> list[PreparedTransactions]:
    """One store per database (several sinks may share one)."""
    seen: dict[str, PreparedTransactions] = {}
    for store in stores:
        seen.setdefault(store.dsn, store)
    return list(seen.values())


def resolve(
    control: ControlStore,
    stores: Iterable[PreparedTransactions],
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
                store.commit(item.gid)
                result.committed.append(item.gid)
            else:
                store.rollback(item.gid)
                result.rolled_back.append(item.gid)
        result.left += len([x for x in store.in_doubt(prefix) if select(x.parsed)])
    return result


def recover(
    control: ControlStore,
    stores: Iterable[PreparedTransactions],
    pipeline: str,
    epoch: int,
) -> RecoveryReport:
    """Raise the fence to ``epoch`` (never lower), then resolve what older epochs left.

    Prepared transactions of ``epoch`` itself (or newer) are left alone: they belong to the
    driver that was, or is about to be, launched with it. Run it with a new epoch to clear
    everything. ``left`` counts every prepared transaction of the pipeline still there.
    """
    started = time.monotonic()
    store_list = list(stores)
    control.ensure_schema()
    for store in distinct(store_list):
        store.ensure_schema()
    change = control.raise_fence(pipeline, epoch)
    done = resolve(control, store_list, pipeline, select=lambda gid: gid.epoch < epoch)
    prefix = pipeline_prefix(pipeline)
    left = sum(len(store.in_doubt(prefix)) for store in distinct(store_list))
    return RecoveryReport(
        pipeline=pipeline,
        fence_from=change.previous,
        fence_to=change.current,
        committed=done.committed,
        rolled_back=done.rolled_back,
        left=left,
        seconds=time.monotonic() - started,
    )


def sweep(
    control: ControlStore, stores: Iterable[PreparedTransactions], pipeline: str
) -> Resolution:
    """Resolve prepared transactions whose epoch is below the fence; safe at any time.

    A zombie can still PREPARE after a recovery (Kubernetes cannot promise an old pod on a
    lost node is dead), and such a transaction holds locks and blocks VACUUM until someone
    ends it. The live epoch's transactions are never touched here.
    """
    fence = control.fence_epoch(pipeline)
    if fence is None:
        return Resolution()
    return resolve(control, stores, pipeline, select=lambda gid: gid.epoch < fence)
