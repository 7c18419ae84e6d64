"""The spec a driver reads (its ConfigMap): what an older job image can still parse."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from eo_jobs.spec import load_pipeline, parse_pipeline
from eo_jobs.spec.models import Audit
from eo_operator.legacy_hash import FIELDS_AT_RETIREMENT, _within
from eo_operator.resources import spec_configmap


@pytest.mark.parametrize("example", ["orders-ledger.yaml", "orders-kafka-sasl.yaml"])
def test_a_drivers_spec_holds_only_fields_an_older_job_image_knows_unless_it_sets_newer_ones(
    repo_root: Path, example: str
) -> None:
    """The fields of the last operator before the spec hash was narrowed are on record
    (``legacy_hash.FIELDS_AT_RETIREMENT``); a pipeline that sets none of the fields added since
    gives its driver none of them, so a driver pinned to that job image still parses it."""
    pipeline = load_pipeline(repo_root / "examples" / example)
    owner = {"metadata": {"name": "p", "uid": "u"}}
    document = yaml.safe_load(spec_configmap(pipeline, owner)["data"]["pipeline.yaml"])
    assert _within(document["spec"], {**FIELDS_AT_RETIREMENT, "suspend": None})
    assert parse_pipeline(document).spec == pipeline.spec.model_copy(update={"audit": Audit()})
    totals = load_pipeline(repo_root / "examples" / "orders-totals.yaml")
    sent = yaml.safe_load(spec_configmap(totals, owner)["data"]["pipeline.yaml"])["spec"]
    assert sent["sinks"][1]["postgres"]["addColumns"] == ["volume_cents", "payments"]
    assert not _within(sent, FIELDS_AT_RETIREMENT)  # it needs a job image that knows them
