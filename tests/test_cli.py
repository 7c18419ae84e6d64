"""The eo command line as users run it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg

from tests.protocol import harness


def _eo(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eo_jobs.cli", *args],
        capture_output=True,
        check=False,
        text=True,
        env=env,
        timeout=120,
    )


def test_help_lists_the_commands_and_exit_codes() -> None:
    out = _eo("--help").stdout
    for command in ("validate", "recover", "run", "demo", "crd", "operator"):
        assert command in out
    assert "75  fenced" in out
    assert "--epoch" in _eo("recover", "--help").stdout


def test_validate_prints_ok_for_the_example_and_fields_for_invalid_ones(repo_root: Path) -> None:
    ok = _eo("validate", str(repo_root / "examples/orders-ledger.yaml"))
    assert ok.returncode == 0 and ok.stdout.startswith("OK ")
    bad = _eo("validate", str(repo_root / "examples/invalid/upsert-without-keys.yaml"))
    assert bad.returncode == 1
    assert "spec.sinks[0].postgres.keyColumns" in bad.stderr


def test_recover_fences_resolves_and_prints_a_json_summary(pg_dsn: str, tmp_path: Path) -> None:
    harness.create_table(pg_dsn)
    assert harness.run_in_child(pg_dsn, 1, [0, 1], "after-decision", fault_batch=1) == -9
    spec = tmp_path / "p.yaml"
    spec.write_text(f"""
apiVersion: eo.dev/v1alpha1
kind: ExactlyOncePipeline
metadata: {{name: ledger, namespace: default}}
spec:
  source: {{files: {{path: /in, format: json, schema: "id BIGINT"}}}}
  sinks: [{{name: {harness.SINK}, postgres: {{dsn: {{env: LEDGER_DSN}}, table: {harness.TABLE}}}}}]
  checkpoint: {{location: /ckpt}}
""")
    env = {"LEDGER_DSN": pg_dsn, "PATH": "/usr/bin:/bin"}
    result = _eo("recover", str(spec), "--epoch", "2", env=env)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["fence"] == {"from": 1, "to": 2}
    assert len(summary["committed"]) == harness.TASKS and summary["left"] == 0
    lower = _eo("recover", str(spec), "--epoch", "1", env=env)
    assert lower.returncode != 0 and "refusing to lower the fence" in lower.stderr
    missing = _eo("recover", str(spec), "--epoch", "3", env={"PATH": "/usr/bin:/bin"})
    assert missing.returncode == 1 and "LEDGER_DSN" in missing.stderr
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM ledger").fetchone() == (120,)
