"""An audit target from a pipeline spec and its resolved DSNs (the operator and the CLI).

The operator resolves DSNs from Secrets and the CLI from the environment; both then describe
the pipeline to the auditor the same way: the spec's sinks and tables, the control database
(``spec.control``, else the first sink's), the dead-letter table in the first sink's database,
the checkpoint location, each sink's ``sumColumns``, ``auditColumn`` and whether it accumulates.
What eo cannot know from the spec (which tables are append-only with eo as their only writer,
which column of the user's rows holds the batch id) is passed in.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from eo_jobs.audit.model import AuditTarget, SinkTarget
from eo_jobs.audit.report import ReportSources
from eo_jobs.spec.models import Pipeline


class NotAppendOnlyError(ValueError):
    """A sink declared append-only whose spec says it upserts."""


def target_for(
    pipeline: Pipeline,
    sink_dsns: Mapping[str, str],
    control_dsn: str,
    *,
    append_only: Collection[str] = (),
    batch_columns: Mapping[str, str] | None = None,
    checkpoint: str | None = None,
    prepared_bound_seconds: float = 600.0,
) -> AuditTarget:
    """The audit target of ``pipeline``; ``checkpoint`` overrides the spec's location."""
    columns = batch_columns or {}
    for sink in pipeline.spec.sinks:
        if sink.name in append_only and sink.target.mode != "append":
            raise NotAppendOnlyError(
                f"sink {sink.name} is mode {sink.target.mode}: its count moves by new keys "
                "only, so it cannot be declared append-only"
            )
    sinks = tuple(
        SinkTarget(
            s.name,
            sink_dsns[s.name],
            s.target.table,
            append_only=s.name in append_only,
            batch_column=s.target.audit_column or columns.get(s.name),
            batch_column_by_eo=s.target.audit_column is not None,
            sum_columns=tuple(s.target.sum_columns),
            accumulates=s.target.mode == "accumulate",
        )
        for s in pipeline.spec.sinks
    )
    return AuditTarget(
        pipeline.key,
        control_dsn,
        sinks,
        sink_dsns[pipeline.spec.sinks[0].name],
        checkpoint or pipeline.spec.checkpoint.location,
        prepared_bound_seconds,
    )


def report_sources_for(
    pipeline: Pipeline, sink_dsns: Mapping[str, str], control_dsn: str
) -> ReportSources:
    """Where ``eo report`` reads for ``pipeline``: the dead letters from its spec's table."""
    first = sink_dsns[pipeline.spec.sinks[0].name]
    return ReportSources(
        pipeline.key, control_dsn, dict(sink_dsns), (first, pipeline.spec.dead_letter_table())
    )
