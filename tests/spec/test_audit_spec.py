"""spec.audit: the operator's continuous audit, bounded and naming only this pipeline's sinks."""

from __future__ import annotations

import yaml

from eo_jobs.spec import parse_pipeline
from eo_operator.resources import spec_configmap, spec_hash
from tests.support.pipelines import document as _doc
from tests.support.pipelines import problems as _problems

UPSERT = {
    "name": "u",
    "postgres": {"dsn": {"env": "PG"}, "table": "public.u", "mode": "upsert", "keyColumns": ["id"]},
}


def test_the_audit_is_on_by_default_with_the_operators_interval_and_a_bounded_pass() -> None:
    audit = parse_pipeline(_doc()).spec.audit
    assert (audit.enabled, audit.interval_seconds, audit.max_batches_per_pass) == (True, None, 5000)


def test_an_interval_or_a_pass_bound_out_of_range_names_its_field() -> None:
    problems = _problems(_doc(audit={"intervalSeconds": 5, "maxBatchesPerPass": 0}))
    assert "greater than or equal to 10" in problems["spec.audit.intervalSeconds"]
    assert "greater than or equal to 1" in problems["spec.audit.maxBatchesPerPass"]
    assert "spec.audit.intervalSeconds" in _problems(_doc(audit={"intervalSeconds": 90000}))


def test_append_only_names_a_sink_of_the_pipeline_that_appends() -> None:
    problems = _problems(_doc(audit={"appendOnly": ["nosuch"]}))
    assert (
        "'nosuch' is not a sink of this pipeline (sinks: ledger)"
        in (problems["spec.audit.appendOnly[0]"])
    )
    sinks = [_doc()["spec"]["sinks"][0], UPSERT]
    problems = _problems(_doc(sinks=sinks, audit={"appendOnly": ["u"]}))
    assert "remove it from audit.appendOnly" in problems["spec.audit.appendOnly[0]"]


def test_a_batch_column_needs_its_sink_declared_append_only() -> None:
    problems = _problems(_doc(audit={"batchColumns": {"ledger": "batch_id"}}))
    assert "in audit.appendOnly too" in problems["spec.audit.batchColumns.ledger"]
    spec = parse_pipeline(
        _doc(audit={"appendOnly": ["ledger"], "batchColumns": {"ledger": "batch_id"}})
    ).spec
    assert spec.audit.batch_columns == {"ledger": "batch_id"}


def test_editing_the_audit_never_restarts_the_driver() -> None:
    before = parse_pipeline(_doc())
    after = parse_pipeline(_doc(audit={"enabled": False, "intervalSeconds": 60}))
    assert spec_hash(before, "img") == spec_hash(after, "img")


def test_the_drivers_spec_leaves_the_audit_out_so_an_older_job_image_still_parses_it() -> None:
    pipeline = parse_pipeline(_doc(audit={"intervalSeconds": 60}))
    owner = {"metadata": {"name": "p", "uid": "u"}}
    document = yaml.safe_load(spec_configmap(pipeline, owner)["data"]["pipeline.yaml"])
    assert "audit" not in document["spec"]
    assert parse_pipeline(document).spec.sinks == pipeline.spec.sinks
