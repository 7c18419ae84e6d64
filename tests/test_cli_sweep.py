"""``eo sweep`` and ``eo forget-query`` tell the user what they did not do, and why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.protocol import harness

SPEC = f"""
apiVersion: eo.dev/v1alpha1
kind: ExactlyOncePipeline
metadata: {{name: ledger, namespace: default}}
spec:
  source: {{files: {{path: /in, format: json, schema: "id BIGINT"}}}}
  sinks: [{{name: {harness.SINK}, postgres: {{dsn: {{env: LEDGER_DSN}}, table: {harness.TABLE}}}}}]
  checkpoint: {{location: /ckpt}}
"""


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    """The pipeline ``default/ledger`` of the protocol harness, as a user's YAML file."""
    path = tmp_path / "ledger.yaml"
    path.write_text(SPEC)
    return path


def _eo(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eo_jobs.cli", *args],
        capture_output=True,
        check=False,
        text=True,
        env={"LEDGER_DSN": dsn, "PATH": "/usr/bin:/bin"},
        timeout=120,
    )


def _has_schema(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT to_regnamespace('eo') IS NOT NULL").fetchone() == (True,)


def test_sweep_lists_the_live_epochs_transactions_it_left_with_the_reason(
    pg_dsn: str, spec: Path
) -> None:
    harness.create_table(pg_dsn)
    zombie = harness.coordinator(pg_dsn, 1)
    zombie.startup()
    live = harness.coordinator(pg_dsn, 2)
    live.startup()
    late = harness.prepare_task(zombie, pg_dsn, 0, 0, harness.batch_rows(0)).gid
    current = harness.prepare_task(live, pg_dsn, 0, 0, harness.batch_rows(0)).gid

    result = _eo(pg_dsn, "sweep", str(spec))

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["fence"] == 2
    assert (report["committed"], report["rolled_back"]) == ([], [late])
    [kept] = report["kept"]
    assert (kept["gid"], kept["sink"], kept["epoch"], kept["batch"]) == (
        current,
        harness.SINK,
        2,
        0,
    )
    assert "live epoch" in kept["reason"]
    assert [x.gid for x in live.stores[harness.SINK].in_doubt("eo1:")] == [current]


def test_sweep_of_a_database_that_never_saw_the_pipeline_says_so_and_creates_nothing(
    pg_dsn: str, spec: Path
) -> None:
    result = _eo(pg_dsn, "sweep", str(spec))

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["fence"] is None
    assert (report["committed"], report["rolled_back"], report["kept"]) == ([], [], [])
    assert "never ran against" in report["note"]
    assert not _has_schema(pg_dsn)


def test_forget_query_with_an_unknown_query_id_says_so_in_one_line(pg_dsn: str, spec: Path) -> None:
    harness.create_table(pg_dsn)
    coord = harness.coordinator(pg_dsn, 1)
    coord.startup()
    harness.run_batch(coord, pg_dsn, 0)

    result = _eo(pg_dsn, "forget-query", str(spec), "--query-id", "no-such-query", "--yes")

    assert result.returncode == 1, result.stdout
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert "no-such-query" in line and harness.QUERY in line
    assert coord.control.has_decisions(harness.PIPELINE, harness.QUERY)


def test_forget_query_on_a_database_that_never_saw_the_pipeline_says_so_in_one_line(
    pg_dsn: str, spec: Path
) -> None:
    result = _eo(pg_dsn, "forget-query", str(spec), "--query-id", "no-such-query", "--yes")

    assert result.returncode == 1, result.stdout
    [line] = result.stderr.splitlines()
    assert "no-such-query" in line and "no decisions" in line
    assert not _has_schema(pg_dsn)
