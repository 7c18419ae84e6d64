"""spec.lifecycle on a real control plane, real Spark drivers and a real PostgreSQL sink:
snapshots taken while a pipeline runs, kept per retention, and a start-over of a pipeline
whose source was replaced; the sink stays exact through both (duplicates and gaps counted
separately against the generated input)."""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.operator.cluster_env import Scene

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _patch(scene: Scene, spec: dict[str, Any]) -> None:
    scene.cluster.kubectl(
        "patch", "eop", scene.name, "-n", scene.namespace, "--type=merge",
        "-p", json.dumps({"spec": spec}),
    )  # fmt: skip


def _lifecycle(scene: Scene) -> dict[str, Any]:
    return dict(scene.status().get("lifecycle") or {})


def _condition(scene: Scene) -> dict[str, Any]:
    conds = scene.status().get("conditions") or []
    return next((c for c in conds if c.get("type") == "Lifecycle"), {})


def _queries(scene: Scene) -> list[tuple[str, int, int]]:
    """(query id, last batch, its epoch) per query in the decision log."""
    with psycopg.connect(scene.dsn) as conn:
        rows = conn.execute(
            """SELECT query_id, max(batch_id),
                      (array_agg(epoch ORDER BY batch_id DESC))[1]
               FROM eo.decisions GROUP BY query_id ORDER BY query_id"""
        ).fetchall()
    return [(str(q), int(b), int(e)) for q, b, e in rows]


def _listed(scene: Scene, nonce: str) -> bool:
    return nonce in [s["nonce"] for s in _lifecycle(scene).get("snapshots", [])]


def _snapshot_folders(scene: Scene) -> list[str]:
    folder = scene.work / "checkpoint" / "eo-snapshots"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _exact(scene: Scene) -> None:
    time.sleep(3)
    audit = scene.audit()
    assert (audit.duplicates, audit.missing, audit.unexpected, audit.prepared_left) == (0,) * 4, (
        audit
    )


def test_snapshots_taken_while_the_pipeline_runs_are_kept_per_retention_and_the_sink_stays_exact(
    scene: Scene,
) -> None:
    scene.add_files(3)
    scene.apply(lifecycle={"retention": 2})
    scene.until("a running driver", scene.running_driver)
    scene.until("first rows", lambda: scene.rows() > 0)
    for nonce in ("s1", "s2", "s3"):
        scene.add_files(2)
        _patch(scene, {"lifecycle": {"retention": 2, "snapshot": {"nonce": nonce}}})
        scene.until(f"snapshot {nonce} listed in status", partial(_listed, scene, nonce))
    scene.add_files(2)
    scene.until("all records delivered", scene.all_delivered)
    _exact(scene)
    listed = _lifecycle(scene)["snapshots"]
    assert [s["name"] for s in listed] == ["snapshot-s2", "snapshot-s3"]
    assert _snapshot_folders(scene) == ["snapshot-s2", "snapshot-s3"]
    # The snapshot's position is the decision log's when it was taken: its query, a batch
    # that query decided with that epoch, and the copied commit log ends there.
    last = listed[-1]
    manifest = json.loads(
        (
            scene.work / "checkpoint" / "eo-snapshots" / "snapshot-s3" / "eo-snapshot.json"
        ).read_text()
    )
    ((query, newest, _),) = _queries(scene)
    assert last["queryId"] == manifest["queryId"] == query
    assert last["lastDecidedBatch"] == manifest["lastDecidedBatch"] <= newest
    # Spark commits a batch after its decision: the copy's commit log may end one before.
    assert last["lastDecidedBatch"] - 1 <= last["lastCommittedBatch"] <= last["lastDecidedBatch"]
    with psycopg.connect(scene.dsn) as conn:
        epoch = conn.execute(
            "SELECT epoch FROM eo.decisions WHERE query_id = %s AND batch_id = %s",
            (query, last["lastDecidedBatch"]),
        ).fetchone()
    assert epoch is not None and epoch[0] == last["lastDecidedEpoch"] < last["epoch"]
    copied = scene.work / "checkpoint" / "eo-snapshots" / "snapshot-s3" / "commits"
    assert (
        max(int(p.name) for p in copied.iterdir() if p.name.isdigit())
        == (last["lastCommittedBatch"])
    )
    assert _condition(scene).get("status") == "True", _condition(scene)
    status = scene.status()
    assert status["restarts"] == 0 and status.get("lastFailure") is None, status
    assert scene.events().count("SnapshotTaken") >= 3


def _move_out(scene: Scene, pattern: str, to: Path) -> None:
    """Take input files out of the source folder (the source is being replaced)."""
    to.mkdir(exist_ok=True)
    for data in sorted((scene.work / "in").glob(pattern)):
        data.rename(to / data.name)


def test_a_start_over_of_a_replaced_source_writes_the_new_input_once_and_forgets_the_old_query(
    scene: Scene,
) -> None:
    scene.add_files(3)  # part-100000-*.json
    scene.apply(audit={"intervalSeconds": 10})
    scene.until("all of the first input delivered", scene.all_delivered)
    ((old_query, _, _),) = _queries(scene)
    _patch(scene, {"suspend": True})
    scene.until(
        "Suspended", lambda: scene.status().get("phase") == "Suspended" and not scene.pods()
    )
    # New input beside the old: starting over would read the old files again. Refused,
    # before anything moved.
    scene.add_files(3)  # part-200000-*.json
    _patch(scene, {"suspend": False, "lifecycle": {"startOver": {"nonce": "n1"}}})
    scene.until(
        "the start-over refused",
        lambda: (
            scene.status().get("reason") == "StartOverRefused"
            and scene.status().get("phase") == "Failed"
        ),
    )
    assert "still in source.files.path" in scene.driver_logs()
    assert _condition(scene).get("reason") == "StartOverRefused"
    assert [q for q, _, _ in _queries(scene)] == [old_query]
    assert _snapshot_folders(scene) == []
    # The old files leave; the new stay. Any edit retries: a new nonce.
    _move_out(scene, "part-100000-*.json", scene.work / "old")
    _patch(scene, {"lifecycle": {"startOver": {"nonce": "n2"}}})
    scene.until(
        "the start-over in status",
        lambda: (_lifecycle(scene).get("startOver") or {}).get("nonce") == "n2",
    )
    scene.until("the new input delivered", scene.all_delivered)
    scene.add_files(2)  # and the new query runs on
    scene.until("more input delivered", scene.all_delivered)
    _exact(scene)
    started = _lifecycle(scene)["startOver"]
    assert started["forgottenQueries"] == [old_query] and started["forgottenDecisions"] > 0
    assert started["snapshot"] == "start-over-n2"
    ((new_query, _, _),) = _queries(scene)
    assert new_query != old_query
    aside = scene.work / "checkpoint" / "eo-snapshots" / "start-over-n2" / "metadata"
    assert json.loads(aside.read_text().splitlines()[0])["id"] == old_query
    assert _condition(scene).get("status") == "True", _condition(scene)
    assert "StartedOver" in scene.events()
    # The continuous audit does not call the forgotten query's decisions a violation.
    scene.until(
        "an audit pass after the start-over",
        lambda: (scene.status().get("audit") or {}).get("lastPassTime", "") > started["time"],
    )
    audited = next(c for c in scene.status()["conditions"] if c["type"] == "Audited")
    assert audited["status"] == "True", audited
