"""A read-only audit of a pipeline's exactly-once evidence, and the reconciliation report.

The decision log (``eo.decisions``), the markers each participant commits with its rows
(``eo.markers``), the prepared transactions left in each sink database, the sink tables and
Spark's checkpoint together say whether every source record landed exactly once. ``audit``
checks that for every batch decided since a position and returns which checks ran, which could
not and why, and each violation with its batch and evidence; ``report`` lists a time window's
batches with a hash chain an auditor can verify later. Nothing here writes to any database.
"""

from eo_jobs.audit.auditor import audit
from eo_jobs.audit.model import (
    AuditResult,
    AuditTarget,
    Check,
    CheckRun,
    Position,
    SinkTarget,
    Status,
    Violation,
)

__all__ = [
    "AuditResult",
    "AuditTarget",
    "Check",
    "CheckRun",
    "Position",
    "SinkTarget",
    "Status",
    "Violation",
    "audit",
]
