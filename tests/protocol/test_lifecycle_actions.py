"""Lifecycle actions on a checkpoint folder and a real control database (both kinds): a
snapshot copies Spark's files with the decision log's position, retention deletes the oldest,
a start-over sets the checkpoint aside and forgets the old queries in one transaction with its
record, each happens once per nonce, and a start-over that would read the old files again is
refused before anything moves.

The checkpoint is written in Spark's file format by hand (a real query's is exercised by the
operator's cluster tests, test_operator_lifecycle_cluster.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from eo_jobs.protocol.control_api import ControlDatabase
from eo_jobs.protocol.errors import LifecycleRefusedError
from eo_jobs.runtime import lifecycle
from eo_jobs.runtime.checkpoint_store import LocalStore
from eo_jobs.spec import parse_pipeline
from eo_jobs.spec.models import Pipeline
from tests.support.pipelines import document

QUERY = "0b6c4a52-8f0e-4f2b-9a57-1d1b6f0e9c11"
NEW_QUERY = "5d7d2c7e-0c8f-4f7e-8f1f-2a4b3e9d6a21"


def _pipeline(tmp_path: Path, **lifecycle: Any) -> Pipeline:
    doc = document(
        source={"files": {"path": str(tmp_path / "in"), "format": "json", "schema": "id BIGINT"}},
        checkpoint={"location": str(tmp_path / "ckpt")},
        lifecycle=lifecycle,
    )
    return parse_pipeline(doc)


def _spark_checkpoint(tmp_path: Path, batches: int = 2, query: str = QUERY) -> list[Path]:
    """A checkpoint as Spark's file source query leaves it after ``batches`` batches, one input
    file each, plus eo's fence folder; returns the input files (created in ``in``)."""
    ckpt, source = tmp_path / "ckpt", tmp_path / "in"
    for folder in ("offsets", "commits", "sources/0", "eo-fence"):
        (ckpt / folder).mkdir(parents=True, exist_ok=True)
    source.mkdir(exist_ok=True)
    (ckpt / "metadata").write_text(json.dumps({"id": query}) + "\n")
    (ckpt / "eo-fence" / "3").write_text("")
    files = []
    for batch in range(batches):
        data = source / f"part-{batch}.json"
        data.write_text('{"id": 1}\n')
        files.append(data)
        stamp = data.stat().st_mtime_ns // 1_000_000  # what Spark logs
        entry = {"path": f"file://{data}", "timestamp": stamp, "batchId": batch}
        (ckpt / "sources" / "0" / str(batch)).write_text("v1\n" + json.dumps(entry) + "\n")
        (ckpt / "offsets" / str(batch)).write_text(
            'v1\n{"batchWatermarkMs":0}\n' + json.dumps({"logOffset": batch}) + "\n"
        )
        (ckpt / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    return files


def _decide(control: ControlDatabase, batches: int, query: str = QUERY, epoch: int = 2) -> None:
    control.raise_fence("pay/p", epoch)
    for batch in range(batches):
        control.decide(
            pipeline="pay/p",
            query_id=query,
            batch_id=batch,
            epoch=epoch,
            participants=[f"eo1:p:{batch}:a"],
            source_offsets=None,
            rows_written=1,
            prepare_ms=1.0,
        )


def _replaced_source(control: ControlDatabase, tmp_path: Path) -> None:
    """Two batches checkpointed and decided, then the source replaced: their input files are
    gone, so a start-over cannot read them again."""
    files = _spark_checkpoint(tmp_path)
    _decide(control, 2)
    for data in files:
        data.unlink()


def _checkpoint(tmp_path: Path) -> lifecycle.Checkpoint:
    return lifecycle.Checkpoint(str(tmp_path / "ckpt"), LocalStore(), lambda _: LocalStore())


def _snapshots(tmp_path: Path) -> list[str]:
    folder = tmp_path / "ckpt" / lifecycle.SNAPSHOTS
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_a_snapshot_copies_sparks_files_with_the_position_once_per_nonce(
    control: ControlDatabase, tmp_path: Path
) -> None:
    _spark_checkpoint(tmp_path)
    _decide(control, 2)
    pipeline = _pipeline(tmp_path, snapshot={"nonce": "a"})
    assert lifecycle.run(pipeline, 3, control, _checkpoint(tmp_path)) == ["snapshot snapshot-a"]
    copy = tmp_path / "ckpt" / lifecycle.SNAPSHOTS / "snapshot-a"
    assert sorted(p.name for p in copy.iterdir()) == [
        "commits",
        lifecycle.MANIFEST,
        "metadata",
        "offsets",
        "sources",
    ]
    manifest = json.loads((copy / lifecycle.MANIFEST).read_text())
    position = {"queryId": QUERY, "lastDecidedBatch": 1, "lastDecidedEpoch": 2}
    assert manifest.items() >= {**position, "lastCommittedBatch": 1, "epoch": 3}.items()
    (record,) = control.lifecycle_records("pay/p")
    assert (record.kind, record.nonce, record.name, record.epoch) == (
        "snapshot",
        "a",
        "snapshot-a",
        3,
    )
    assert record.detail.items() >= position.items()
    # The checkpoint itself is untouched, and the same nonce is not taken again.
    assert (tmp_path / "ckpt" / "metadata").exists()
    assert lifecycle.run(pipeline, 4, control, _checkpoint(tmp_path)) == []
    assert len(control.lifecycle_records("pay/p")) == 1


def test_retention_deletes_the_oldest_snapshot_folders_and_keeps_their_records(
    control: ControlDatabase, tmp_path: Path
) -> None:
    _spark_checkpoint(tmp_path)
    _decide(control, 2)
    for epoch, nonce in enumerate(("a", "b", "c"), start=3):
        pipeline = _pipeline(tmp_path, snapshot={"nonce": nonce}, retention=2)
        lifecycle.run(pipeline, epoch, control, _checkpoint(tmp_path))
    assert _snapshots(tmp_path) == ["snapshot-b", "snapshot-c"]
    records = control.lifecycle_records("pay/p")
    assert [(r.nonce, r.pruned_at is not None) for r in records] == [
        ("a", True),
        ("b", False),
        ("c", False),
    ]
    # A pruned nonce is still done: it is not taken again.
    again = _pipeline(tmp_path, snapshot={"nonce": "a"}, retention=2)
    assert lifecycle.run(again, 6, control, _checkpoint(tmp_path)) == []


def test_a_start_over_sets_the_checkpoint_aside_and_forgets_every_old_query_once(
    control: ControlDatabase, tmp_path: Path
) -> None:
    _replaced_source(control, tmp_path)
    pipeline = _pipeline(tmp_path, startOver={"nonce": "n1"})
    done = lifecycle.run(pipeline, 3, control, _checkpoint(tmp_path))
    assert done == ["start-over start-over-n1"]
    ckpt = tmp_path / "ckpt"
    assert sorted(p.name for p in ckpt.iterdir()) == ["eo-fence", lifecycle.SNAPSHOTS]
    aside = ckpt / lifecycle.SNAPSHOTS / "start-over-n1"
    assert json.loads((aside / "metadata").read_text())["id"] == QUERY
    assert control.queries("pay/p") == []
    (record,) = control.lifecycle_records("pay/p")
    assert record.detail["forgottenQueries"] == [QUERY]
    assert record.detail["forgottenDecisions"] == 2
    # The new query decides; the same nonce never forgets it.
    _decide(control, 1, query=NEW_QUERY, epoch=3)
    assert lifecycle.run(pipeline, 4, control, _checkpoint(tmp_path)) == []
    assert control.queries("pay/p") == [(NEW_QUERY, 0)]


def test_a_start_over_whose_old_files_are_still_there_is_refused_and_moves_nothing(
    control: ControlDatabase, tmp_path: Path
) -> None:
    _spark_checkpoint(tmp_path, batches=5)
    _decide(control, 5)
    pipeline = _pipeline(tmp_path, startOver={"nonce": "n1"})
    with pytest.raises(LifecycleRefusedError) as refused:
        lifecycle.run(pipeline, 3, control, _checkpoint(tmp_path))
    said = str(refused.value)
    assert "5 of the 5 files" in said and "unchanged" in said and "and 2 more" in said
    assert "allowReread" in said
    assert _snapshots(tmp_path) == []
    assert (tmp_path / "ckpt" / "metadata").exists()
    assert len(control.queries("pay/p")) == 1
    assert control.lifecycle_records("pay/p") == []
    # Accepting the duplicates lets it through.
    accepted = _pipeline(tmp_path, startOver={"nonce": "n1", "allowReread": True})
    assert lifecycle.run(accepted, 3, control, _checkpoint(tmp_path))
    assert control.queries("pay/p") == []


def test_a_file_replaced_under_the_same_name_is_new_input_not_a_reread(
    control: ControlDatabase, tmp_path: Path
) -> None:
    files = _spark_checkpoint(tmp_path)
    _decide(control, 2)
    for data in files:  # new content under the old names
        data.unlink()
        data.write_text('{"id": 2}\n')
        os.utime(data, ns=(0, data.stat().st_mtime_ns + 5_000_000_000))
    pipeline = _pipeline(tmp_path, startOver={"nonce": "n1"})
    assert lifecycle.run(pipeline, 3, control, _checkpoint(tmp_path))


def test_a_start_over_cut_short_after_the_move_finishes_at_the_next_start(
    control: ControlDatabase, tmp_path: Path
) -> None:
    _replaced_source(control, tmp_path)
    pipeline = _pipeline(tmp_path, startOver={"nonce": "n1"})
    # A driver died after writing the manifest and moving part of the checkpoint.
    checkpoint = _checkpoint(tmp_path)
    aside = checkpoint.at(lifecycle.SNAPSHOTS, "start-over-n1")
    where = lifecycle.position(checkpoint, control, "pay/p")
    LocalStore().write(f"{aside}/{lifecycle.MANIFEST}", json.dumps(where))
    LocalStore().move(checkpoint.at("metadata"), f"{aside}/metadata")
    assert lifecycle.run(pipeline, 4, control, _checkpoint(tmp_path)) == [
        "start-over start-over-n1"
    ]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "eo-fence",
        lifecycle.SNAPSHOTS,
    ]
    (record,) = control.lifecycle_records("pay/p")
    assert record.detail["queryId"] == QUERY and record.detail["forgottenDecisions"] == 2


def test_a_snapshot_and_a_start_over_asked_together_copy_first_then_start_over(
    control: ControlDatabase, tmp_path: Path
) -> None:
    _replaced_source(control, tmp_path)
    pipeline = _pipeline(tmp_path, snapshot={"nonce": "s"}, startOver={"nonce": "n"})
    assert lifecycle.run(pipeline, 3, control, _checkpoint(tmp_path)) == [
        "snapshot snapshot-s",
        "start-over start-over-n",
    ]
    assert _snapshots(tmp_path) == ["snapshot-s", "start-over-n"]
    snap = tmp_path / "ckpt" / lifecycle.SNAPSHOTS / "snapshot-s" / "metadata"
    assert json.loads(snap.read_text())["id"] == QUERY


def test_an_automatic_snapshot_is_taken_once_per_spec_and_job_image(
    control: ControlDatabase, tmp_path: Path
) -> None:
    _spark_checkpoint(tmp_path)
    _decide(control, 2)

    def start(epoch: int, image: str = "eo-job:1", interval: int = 10, **more: Any) -> list[str]:
        doc = document(
            source={
                "files": {"path": str(tmp_path / "in"), "format": "json", "schema": "id BIGINT"}
            },
            checkpoint={"location": str(tmp_path / "ckpt"), "triggerIntervalSeconds": interval},
            lifecycle={"snapshotOnSpecChange": True, "retention": 10, **more},
        )
        return list(
            lifecycle.run(parse_pipeline(doc), epoch, control, _checkpoint(tmp_path), image)
        )

    (first,) = start(3)
    assert first.startswith("snapshot snapshot-auto-")
    assert start(4) == []  # a restart of the same spec and image
    # A nonce edit is no new spec: only the snapshot it asks for.
    assert start(5, snapshot={"nonce": "x"}) == ["snapshot snapshot-x"]
    (edited,) = start(6, interval=20)
    (upgraded,) = start(7, image="eo-job:2", interval=20)
    assert len({first, edited, upgraded}) == 3
    assert start(8) == []  # reverted to a spec already snapshotted
