"""``eo audit`` and ``eo report`` on a real decision log: text and JSON, exit codes, a saved
position, flags instead of a file, and a saved report verified later."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.audit import harness as h
from tests.protocol import harness

SPEC = f"""
apiVersion: eo.dev/v1alpha1
kind: ExactlyOncePipeline
metadata: {{name: ledger, namespace: default}}
spec:
  source: {{files: {{path: /in, format: json, schema: "id BIGINT"}}}}
  sinks: [{{name: {harness.SINK}, postgres: {{dsn: {{env: LEDGER_DSN}}, table: {harness.TABLE}}}}}]
  checkpoint: {{location: /nonexistent-ckpt}}
"""


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    """The pipeline ``default/ledger`` of the protocol harness, as a user's YAML file."""
    path = tmp_path / "ledger.yaml"
    path.write_text(SPEC)
    return path


def _code() -> dict[str, str]:
    """The child runs the code under test (a worktree's, when PYTHONPATH points there)."""
    return {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}


def _eo(dsn: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eo_jobs.cli", *args],
        capture_output=True,
        check=False,
        text=True,
        env={"LEDGER_DSN": dsn, "PATH": "/usr/bin:/bin", **_code(), **env},
        timeout=120,
    )


def test_audit_prints_the_contract_then_which_checks_ran(pg_dsn: str, spec: Path) -> None:
    h.drive(pg_dsn, range(3))
    result = _eo(pg_dsn, "audit", str(spec), "--append-only", harness.SINK)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{harness.SINK}: OK")
    assert "audit of default/ledger: OK (3 batches audited" in lines[1]
    assert any(line.strip().startswith("ran     table-count") for line in lines)
    assert any(
        "NOT RUN source-files" in line and "/nonexistent-ckpt is not a folder" in line
        for line in lines
    )


def test_audit_exits_78_and_names_the_batch_of_a_violation(pg_dsn: str, spec: Path) -> None:
    h.drive(pg_dsn, range(3))
    h.sql(
        pg_dsn, "INSERT INTO public.ledger SELECT * FROM public.ledger WHERE batch_id = 1 LIMIT 1"
    )
    result = _eo(pg_dsn, "audit", str(spec), "--append-only", harness.SINK,
                 "--batch-column", f"{harness.SINK}=batch_id", "--json")  # fmt: skip
    assert result.returncode == 78, result.stderr
    shape = json.loads(result.stdout)
    assert shape["ok"] is False and shape["contract"][0].startswith(f"{harness.SINK}: OK")
    assert {(v["check"], v["batch"]) for v in shape["violations"]} == {
        ("batch-column", 1),
        ("table-count", 2),
    }


def test_audit_keeps_its_position_in_a_file(pg_dsn: str, spec: Path, tmp_path: Path) -> None:
    coord = h.drive(pg_dsn, range(3))
    position = tmp_path / "position.json"
    args = ("audit", str(spec), "--append-only", harness.SINK, "--position", str(position))
    assert _eo(pg_dsn, *args, "--json").returncode == 0
    assert json.loads(position.read_text())["batches"] == {h.harness_token(): 2}
    h.drive(pg_dsn, range(3, 5), coord=coord)
    again = json.loads(_eo(pg_dsn, *args, "--json").stdout)
    assert again["batches"] == 2 and again["ok"] is True
    assert json.loads(position.read_text())["batches"] == {h.harness_token(): 4}


def test_audit_takes_the_pipeline_as_flags(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(2))
    h.sql(pg_dsn, "DELETE FROM eo.decisions WHERE batch_id = 0")
    result = _eo(
        "unused",
        "audit",
        "--pipeline",
        harness.PIPELINE,
        "--sink",
        f"{harness.SINK}={harness.TABLE}",
        EO_SINK_LEDGER_DSN=pg_dsn,
    )
    assert result.returncode == 78, result.stdout + result.stderr
    assert "VIOLATION decision-log batch 0" in result.stdout
    missing = _eo("unused", "audit", "--pipeline", harness.PIPELINE, "--sink", "ledger=public.x")
    assert missing.returncode == 2 and "EO_SINK_LEDGER_DSN" in missing.stderr


def test_report_saves_json_that_verifies_until_the_database_changes(
    pg_dsn: str, spec: Path, tmp_path: Path
) -> None:
    h.drive(pg_dsn, range(4))
    start = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    end = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    text = _eo(pg_dsn, "report", str(spec), "--from", start, "--to", end)
    assert text.returncode == 0, text.stderr
    assert "4 batches, 240 rows written" in text.stdout and "hash chain (sha256)" in text.stdout
    saved = tmp_path / "report.json"
    made = _eo(pg_dsn, "report", str(spec), "--from", start, "--to", end, "--json")
    saved.write_text(made.stdout)
    ok = _eo(pg_dsn, "report", str(spec), "--verify", str(saved))
    assert ok.returncode == 0 and ok.stdout.startswith("OK: 4 batches match"), ok.stdout
    h.sql(pg_dsn, "UPDATE eo.decisions SET epoch = 7 WHERE batch_id = 1")
    bad = _eo(pg_dsn, "report", str(spec), "--verify", str(saved), "--json")
    assert bad.returncode == 78
    assert json.loads(bad.stdout)["batch"] == 1


def test_report_needs_a_window(pg_dsn: str, spec: Path) -> None:
    result = _eo(pg_dsn, "report", str(spec))
    assert result.returncode == 2 and "--from and --to" in result.stderr


def test_audit_checks_the_sum_columns_the_spec_declares(pg_dsn: str, tmp_path: Path) -> None:
    h.drive(pg_dsn, range(3), sums=h.ledger_sums)
    h.sql(pg_dsn, "UPDATE public.ledger SET amount_cents = amount_cents + 1 WHERE id = 1002")
    path = tmp_path / "ledger.yaml"
    path.write_text(SPEC.replace(f"table: {harness.TABLE}", f"table: {harness.TABLE}, "
                                 "sumColumns: [amount_cents]"))  # fmt: skip
    result = _eo(pg_dsn, "audit", str(path), "--append-only", harness.SINK,
                 "--batch-column", f"{harness.SINK}=batch_id", "--json")  # fmt: skip
    assert result.returncode == 78, result.stdout + result.stderr
    shape = json.loads(result.stdout)
    assert {(v["check"], v["batch"]) for v in shape["violations"]} == {
        ("sum-columns", 1),  # per batch
        ("sum-columns", 2),  # table-wide, at the batch the pass reached
    }
    assert shape["end"]["table_sums"][harness.SINK]["amount_cents"]
    refused = _eo(pg_dsn, "audit", str(path), "--sum-columns", f"{harness.SINK}=amount_cents")
    assert refused.returncode == 2 and "sumColumns" in refused.stderr


def test_audit_takes_sum_columns_and_accumulating_sinks_as_flags(pg_dsn: str) -> None:
    h.drive(pg_dsn, range(3), sums=h.totals_sums, totals=True)
    h.sql(pg_dsn, "UPDATE public.totals SET volume = volume * 2 WHERE merchant = 'm3'")
    env = {"EO_SINK_LEDGER_DSN": pg_dsn, "EO_SINK_TOTALS_DSN": pg_dsn}
    flags = ["audit", "--pipeline", harness.PIPELINE, "--append-only", harness.SINK]
    flags += ["--sink", f"{harness.SINK}={harness.TABLE}", "--sink", f"{h.TOTALS}={h.TOTALS_TABLE}"]
    flags += [
        "--sum-columns",
        f"{h.TOTALS}=volume",
        "--sum-columns",
        f"{harness.SINK}=amount_cents",
    ]
    result = _eo("unused", *flags, "--accumulates", h.TOTALS, "--json", **env)
    assert result.returncode == 78, result.stdout + result.stderr
    shape = json.loads(result.stdout)
    assert [(v["check"], v["batch"], v["evidence"].split(":")[0]) for v in shape["violations"]] == [
        ("sum-columns", 2, h.TOTALS_TABLE)
    ]
    ran = {(c["subject"], c["status"]) for c in shape["checks"] if c["check"] == "sum-columns"}
    assert ran == {
        (f"{harness.SINK} ({harness.TABLE}, whole table)", "ran"),
        (f"{h.TOTALS} ({h.TOTALS_TABLE}, whole table)", "ran"),
    }
    # Without --accumulates the totals table's sums prove nothing: not run.
    plain = json.loads(_eo("unused", *flags, "--json", **env).stdout)
    assert plain["ok"] is True
    bad = _eo("unused", *flags, "--accumulates", harness.SINK, **env)
    assert bad.returncode == 2 and "not append-only" in bad.stderr
    typo = _eo("unused", *flags, "--sum-columns", "nosuch=x", **env)
    assert typo.returncode == 2 and "no sink named nosuch" in typo.stderr
