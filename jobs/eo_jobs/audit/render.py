"""An audit result as text for a person (``eo audit`` without ``--json``)."""

from __future__ import annotations

from eo_jobs.audit.model import AuditResult, Status


def render(result: AuditResult) -> str:
    """Verdict first, then every violation, the checks that did not fully run, and progress."""
    verdict = "OK" if result.ok else f"{len(result.violations)} VIOLATION(S)"
    last = ", ".join(f"{q} up to batch {b}" for q, b in sorted(result.last_batch.items()))
    lines = [
        f"audit of {result.pipeline}: {verdict} ({result.batches} batches audited in "
        f"{result.seconds:.2f} s; decided: {last or 'nothing'})"
    ]
    for v in result.violations:
        where = "" if v.batch is None else f"batch {v.batch}: "
        lines.append(f"  VIOLATION {v.check} {where}{v.evidence}")
    for run in result.checks:
        mark = {Status.RAN: "ran    ", Status.PARTIAL: "partial", Status.NOT_RUN: "NOT RUN"}
        detail = f": {run.detail}" if run.detail else ""
        lines.append(f"  {mark[run.status]} {run.check} [{run.subject}]{detail}")
    lines.extend(f"  pending {p}" for p in result.pending)
    return "\n".join(lines) + "\n"
