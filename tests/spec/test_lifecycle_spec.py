"""spec.lifecycle: snapshot and start-over nonces name checkpoint folders (a DNS-label-like
word), retention is bounded, and a start-over that would read a kafka topic again from its
earliest offset is refused unless the user accepts the duplicates (allowReread)."""

from __future__ import annotations

from typing import Any

import pytest

from eo_jobs.spec import parse_pipeline
from tests.support.pipelines import document as _doc
from tests.support.pipelines import problems as _problems

START_OVER = "spec.lifecycle.startOver"


def _kafka(starting: str | None = None) -> dict[str, Any]:
    kafka: dict[str, Any] = {"bootstrapServers": "k:9092", "topics": ["t"], "schema": "id BIGINT"}
    if starting is not None:
        kafka["startingOffsets"] = starting
    return {"kafka": kafka}


def test_unset_there_is_no_lifecycle_action() -> None:
    assert parse_pipeline(_doc()).spec.lifecycle is None


def test_a_snapshot_and_a_start_over_parse_with_a_default_retention_of_3() -> None:
    doc = _doc(lifecycle={"snapshot": {"nonce": "before-v2"}, "startOver": {"nonce": "n1"}})
    lifecycle = parse_pipeline(doc).spec.lifecycle
    assert lifecycle is not None and lifecycle.retention == 3
    assert lifecycle.snapshot is not None and lifecycle.snapshot.nonce == "before-v2"
    assert lifecycle.start_over is not None and not lifecycle.start_over.allow_reread


@pytest.mark.parametrize("nonce", ["", "Upper", "a/b", "-a", "a-", "x" * 41, "a_b"])
def test_a_nonce_that_cannot_name_a_folder_is_refused(nonce: str) -> None:
    assert "spec.lifecycle.snapshot.nonce" in _problems(
        _doc(lifecycle={"snapshot": {"nonce": nonce}})
    )


@pytest.mark.parametrize("retention", [0, 51])
def test_retention_out_of_range_is_refused(retention: int) -> None:
    doc = _doc(lifecycle={"retention": retention})
    assert "spec.lifecycle.retention" in _problems(doc)


@pytest.mark.parametrize("starting", [None, "earliest"])
def test_a_kafka_start_over_from_earliest_is_refused_naming_both_ways_out(
    starting: str | None,
) -> None:
    doc = _doc(source=_kafka(starting), lifecycle={"startOver": {"nonce": "n1"}})
    problem = _problems(doc)[START_OVER]
    assert "startingOffsets: latest" in problem and "allowReread: true" in problem


@pytest.mark.parametrize(
    ("starting", "allow"), [("latest", False), ("earliest", True), (None, True)]
)
def test_a_kafka_start_over_from_latest_or_accepting_rereads_is_accepted(
    starting: str | None, allow: bool
) -> None:
    doc = _doc(
        source=_kafka(starting), lifecycle={"startOver": {"nonce": "n1", "allowReread": allow}}
    )
    assert parse_pipeline(doc).spec.lifecycle is not None


def test_a_files_start_over_is_checked_by_the_driver_not_the_spec() -> None:
    # Whether the old files are still there is only known where the files are.
    assert parse_pipeline(_doc(lifecycle={"startOver": {"nonce": "n1"}})).spec.lifecycle


def test_automatic_snapshots_are_off_unless_asked_for() -> None:
    doc = _doc(lifecycle={"snapshotOnSpecChange": True})
    lifecycle = parse_pipeline(doc).spec.lifecycle
    assert lifecycle is not None and lifecycle.snapshot_on_spec_change
    default = parse_pipeline(_doc(lifecycle={})).spec.lifecycle
    assert default is not None and not default.snapshot_on_spec_change
