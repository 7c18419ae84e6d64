"""eo's own continuous audit, run through a chaos run the way the operator runs it.

The harness's checks (``bench.chaos.audit``) compare the sinks with the generated source once,
at the end. The operator's auditor (``eo_jobs.audit``) only sees what eo recorded (decisions,
markers, the checkpoint, the tables) and runs pass after pass while the pipeline runs. Running
it here after every fault shows two things the end-of-run audit cannot: that it raises no
false alarm while drivers are killed, frozen and replaced mid-batch, and that its checks agree
with the harness's at the end. Its violations count in the run's summary beside the harness's.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from eo_jobs.audit import AuditTarget, Position, SinkTarget, audit
from eo_jobs.audit.model import AuditResult, Violation

MAX_BATCHES_PER_PASS = 500
"""The operator's default bound per pass (``spec.audit.maxBatchesPerPass``)."""


def chaos_target(
    pipeline: str, dsn: str, checkpoint: Path, *, mysql_dsn: str | None = None
) -> AuditTarget:
    """The chaos pipeline's three sinks; the ledger is append-only with eo as its only writer
    (the harness writes nothing to it), so its count is checked too, and the sum columns (the
    ledger's in PostgreSQL, the totals') are checked against the sums each decision recorded.
    With ``mysql_dsn`` the ledger and the latest table are MariaDB's (``--sink mysql``)."""
    rows = mysql_dsn or dsn
    prefix = "chaos." if mysql_dsn else "public."
    return AuditTarget(
        pipeline,
        dsn,
        (
            SinkTarget(
                "ledger",
                rows,
                f"{prefix}ledger",
                append_only=True,
                sum_columns=() if mysql_dsn else ("amount_cents",),
            ),
            SinkTarget("latest", rows, f"{prefix}latest"),
            SinkTarget(
                "totals",
                dsn,
                "public.merchant_totals",
                sum_columns=("volume_cents", "orders"),
                accumulates=True,
            ),
        ),
        checkpoint=str(checkpoint),
    )


@dataclass
class ContinuousAudit:
    """Passes of ``eo_jobs.audit.audit`` from a kept position, as the operator keeps it."""

    target: AuditTarget
    position: Position | None = None
    passes: int = 0
    batches: int = 0
    errors: int = 0
    """Passes that raised (a database that was down): not a violation, but counted."""
    violations: Counter[str] = field(default_factory=Counter)
    """New violations by check; one reported again by a later pass counts once."""
    not_run: set[str] = field(default_factory=set)
    """Checks that did not run (or ran in part) in some pass, with the reason."""
    ran: set[str] = field(default_factory=set)
    """Checks that ran in full over some subject in some pass."""
    _seen: set[tuple[str, int | None, str | None, str]] = field(default_factory=set)

    def run_pass(self) -> AuditResult | None:
        """One pass; prints each new violation with its evidence."""
        try:
            result = audit(self.target, self.position, max_batches=MAX_BATCHES_PER_PASS)
        except Exception as exc:  # the auditor's databases are part of the chaos
            self.errors += 1
            print(f"  audit pass failed: {type(exc).__name__}: {exc}", flush=True)
            return None
        self.passes += 1
        self.batches += result.batches
        self.position = result.end
        partly = result.not_run()
        self.not_run |= {f"{c.check} {c.subject}: {c.detail}" for c in partly}
        self.ran |= {str(c.check) for c in result.checks if c not in partly}
        for violation in result.violations:
            if self._new(violation):
                self.violations[f"audit_{violation.check}"] += 1
                print(
                    f"  AUDIT VIOLATION {violation.check} batch {violation.batch}: "
                    f"{violation.evidence}",
                    flush=True,
                )
        return result

    def finish(self, timeout: float = 120) -> None:
        """Passes until nothing is left committing (the last batches' phase 2), or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.run_pass()
            if (result is not None and not result.pending) or time.monotonic() > deadline:
                return
            time.sleep(2)

    def _new(self, violation: Violation) -> bool:
        """A batch's violation is one per check and batch; a table-wide one per evidence."""
        key = (
            str(violation.check),
            violation.batch,
            violation.query,
            violation.evidence if violation.batch is None else "",
        )
        if key in self._seen:
            return False
        self._seen.add(key)
        return True
