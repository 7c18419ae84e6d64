"""The reconciliation report over a real decision log: its hash chain verifies against the
database, and any later change to a batch (or to the saved file) is named by batch."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from eo_jobs.audit import report
from tests.audit import harness as h
from tests.protocol import harness as ph

DEAD = "public.ledger_dead_letter"
DEAD_DDL = (  # the driver's (runtime.main.DEAD_LETTER_DDL); audit tests do not import runtime
    "CREATE TABLE {} (pipeline text NOT NULL, batch_id bigint NOT NULL, raw text, "
    "reason text NOT NULL, recorded_at timestamptz NOT NULL DEFAULT now())"
)


def _sources(dsn: str) -> report.ReportSources:
    return report.ReportSources(ph.PIPELINE, dsn, {ph.SINK: dsn}, (dsn, DEAD))


def _window() -> tuple[datetime, datetime]:
    now = datetime.now(UTC)
    return now - timedelta(hours=1), now + timedelta(hours=1)


def _saved(dsn: str) -> dict[str, Any]:
    """A report as `eo report --json` saves it (a JSON round trip)."""
    start, end = _window()
    return json.loads(json.dumps(report.build(_sources(dsn), start, end)))


def _pipeline(dsn: str, batches: int = 5) -> None:
    h.drive(dsn, range(batches))
    h.sql(dsn, DEAD_DDL.format(DEAD))
    h.sql(
        dsn,
        f"INSERT INTO {DEAD} (pipeline, batch_id, raw, reason) VALUES "
        "(%s, 1, '{', 'malformed'), (%s, 1, 'x', 'malformed')",
        (ph.PIPELINE, ph.PIPELINE),
    )


def test_a_report_lists_batches_ranges_rows_and_dead_letters(pg_dsn: str) -> None:
    _pipeline(pg_dsn)
    saved = _saved(pg_dsn)
    assert [b["batch"] for b in saved["batches"]] == [0, 1, 2, 3, 4]
    one = saved["batches"][1]
    assert one["source_ranges"] == [{"orders-0": [20, 40], "orders-1": [40, 80]}]
    assert saved["batches"][0]["source_ranges"] == [
        {"orders-0": [None, 20], "orders-1": [None, 40]}
    ]
    assert one["rows_written"] == ph.ROWS_PER_BATCH and one["dead_letters"] == 2
    assert one["rows_by_sink"] == {ph.SINK: ph.ROWS_PER_BATCH}
    assert saved["batches"][0]["dead_letters"] == 0
    assert saved["totals"] == {
        "batches": 5,
        "rows_written": 5 * ph.ROWS_PER_BATCH,
        "dead_letters": 2,
    }
    assert saved["epochs"] == [{"epoch": 1, "first_batch": 0, "last_batch": 4, "batches": 5}]
    assert saved["chain"]["head"] == saved["batches"][-1]["hash"]
    text = report.render(saved)
    assert "5 batches, 300 rows written, 2 dead letters" in text and saved["chain"]["head"] in text


def test_the_saved_report_verifies_against_an_unchanged_database(pg_dsn: str) -> None:
    _pipeline(pg_dsn)
    saved = _saved(pg_dsn)
    h.drive(pg_dsn, range(5, 7), coord=ph.coordinator(pg_dsn, 1))  # decided after the report
    checked = report.verify(saved, _sources(pg_dsn))
    assert checked.ok, checked.message


def test_a_changed_decision_is_named_by_batch(pg_dsn: str) -> None:
    _pipeline(pg_dsn)
    saved = _saved(pg_dsn)
    h.sql(pg_dsn, "UPDATE eo.decisions SET rows_written = rows_written - 1 WHERE batch_id = 2")
    checked = report.verify(saved, _sources(pg_dsn))
    assert not checked.ok and checked.batch == 2
    assert "rows_written" in checked.message


def test_a_deleted_decision_is_named_by_batch(pg_dsn: str) -> None:
    _pipeline(pg_dsn)
    saved = _saved(pg_dsn)
    h.sql(pg_dsn, "DELETE FROM eo.decisions WHERE batch_id = 3")
    checked = report.verify(saved, _sources(pg_dsn))
    assert not checked.ok and checked.batch == 3


def test_a_deleted_dead_letter_is_named_by_batch(pg_dsn: str) -> None:
    _pipeline(pg_dsn)
    saved = _saved(pg_dsn)
    h.sql(pg_dsn, f"DELETE FROM {DEAD} WHERE raw = 'x'")
    checked = report.verify(saved, _sources(pg_dsn))
    assert not checked.ok and checked.batch == 1 and "dead_letters" in checked.message


def test_an_edited_report_file_is_named_by_batch(pg_dsn: str) -> None:
    _pipeline(pg_dsn)
    saved = _saved(pg_dsn)
    saved["batches"][1]["rows_written"] += 1  # the database is unchanged; the file is not
    checked = report.verify(saved, _sources(pg_dsn))
    assert not checked.ok and checked.batch == 1 and "file itself was altered" in checked.message


def test_each_hash_chains_the_one_before(pg_dsn: str) -> None:
    _pipeline(pg_dsn, 3)
    saved = _saved(pg_dsn)
    head = report.genesis(ph.PIPELINE, saved["from"], saved["to"])
    for record in saved["batches"]:
        head = report.chain(head, record)
        assert record["hash"] == head
    changed = dict(saved["batches"][0], epoch=9)
    assert (
        report.chain(report.genesis(ph.PIPELINE, saved["from"], saved["to"]), changed)
        != (saved["batches"][0]["hash"])
    )


def test_the_window_selects_batches_by_decision_time(pg_dsn: str) -> None:
    _pipeline(pg_dsn, 2)
    later = datetime.now(UTC) + timedelta(hours=2)
    empty = report.build(_sources(pg_dsn), later, later + timedelta(hours=1))
    assert empty["batches"] == [] and empty["totals"]["batches"] == 0
