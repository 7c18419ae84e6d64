"""``eo sweep`` and ``eo forget-query`` tell the user what they did not do, and why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from eo_jobs.pgserver import PgServer
from eo_jobs.protocol import registry
from eo_jobs.protocol.xa import PreparedTransactions
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


def _eo(dsn: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eo_jobs.cli", *args],
        capture_output=True,
        check=False,
        text=True,
        env={"LEDGER_DSN": dsn, "PATH": "/usr/bin:/bin", **env},
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


def _participant_databases(dsn: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT sink, database::text FROM eo.participant_databases ORDER BY sink"
        ).fetchall()
    return [(str(s), str(d)) for s, d in rows]


def test_sweep_visits_the_database_of_a_sink_removed_from_the_spec_and_claims_nothing(
    pg_dsn: str, pg_server: PgServer, spec: Path
) -> None:
    """Sink ``old`` held participants under an earlier spec; the spec now names only the
    ledger. A zombie's transaction left there below the fence is rolled back, as ``eo recover``
    and the operator do, reached through the credential reference the control database kept."""
    old_dsn = pg_server.create_database(
        f"{psycopg.conninfo.conninfo_to_dict(pg_dsn)['dbname']}_old"
    )
    harness.create_table(pg_dsn)
    harness.create_table(old_dsn)
    zombie = harness.coordinator(pg_dsn, 1)
    zombie.stores["old"] = PreparedTransactions(old_dsn)
    zombie.startup()
    registry.claim(
        zombie.control,
        {
            harness.SINK: (zombie.stores[harness.SINK], {"env": "LEDGER_DSN"}),
            "old": (zombie.stores["old"], {"env": "OLD_DSN"}),
        },
        harness.PIPELINE,
    )
    gid = zombie.gid(harness.QUERY, "old", 0, 0, 0)
    harness.writer(old_dsn).write(
        harness.batch_rows(0), gid=gid, pipeline=harness.PIPELINE, batch_id=0
    )
    harness.coordinator(pg_dsn, 2).startup()  # the live driver: the spec without sink old
    recorded = _participant_databases(pg_dsn)

    result = _eo(pg_dsn, "sweep", str(spec), OLD_DSN=old_dsn)

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["fence"], report["committed"], report["rolled_back"]) == (2, [], [gid])
    assert PreparedTransactions(old_dsn).in_doubt("eo1:") == []
    assert _participant_databases(pg_dsn) == recorded  # nothing claimed or recorded


def test_sweep_names_a_removed_sinks_database_it_cannot_reach_and_sweeps_the_rest(
    pg_dsn: str, pg_server: PgServer, spec: Path
) -> None:
    old_dsn = pg_server.create_database(
        f"{psycopg.conninfo.conninfo_to_dict(pg_dsn)['dbname']}_gone"
    )
    harness.create_table(pg_dsn)
    coord = harness.coordinator(pg_dsn, 1)
    coord.stores["old"] = PreparedTransactions(old_dsn)
    coord.startup()
    registry.claim(
        coord.control,
        {"old": (coord.stores["old"], {"env": "OLD_DSN"})},
        harness.PIPELINE,
    )

    result = _eo(pg_dsn, "sweep", str(spec))  # OLD_DSN is not set here

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["fence"] == 1
    assert "OLD_DSN" in result.stderr and "old" in result.stderr, result.stderr
