"""The eo command line as users run it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg

from tests.protocol import harness
from tests.support.pipelines import LOCAL_YAML


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
    assert bad.returncode == 3
    assert "spec.sinks[0].postgres.keyColumns" in bad.stderr


def test_validate_refuses_a_literal_kafka_credential_and_accepts_it_by_reference(
    repo_root: Path,
) -> None:
    bad = _eo("validate", str(repo_root / "examples/invalid/kafka-literal-jaas.yaml"))
    assert bad.returncode == 3
    assert "spec.source.kafka.options: key kafka.sasl.jaas.config carries a credential" in (
        bad.stderr
    )
    assert "spec.source.kafka.secretOptions" in bad.stderr
    assert "do-not-do-this" not in bad.stderr
    ok = _eo("validate", str(repo_root / "examples/orders-kafka-sasl.yaml"))
    assert ok.returncode == 0 and ok.stdout.startswith("OK "), ok.stderr


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
    assert lower.returncode == 1 and "refusing to lower the fence" in lower.stderr
    assert "Traceback" not in lower.stderr
    missing = _eo("recover", str(spec), "--epoch", "3", env={"PATH": "/usr/bin:/bin"})
    assert missing.returncode == 2 and "LEDGER_DSN" in missing.stderr
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM ledger").fetchone() == (120,)


def test_validate_is_for_kubernetes_unless_told_local(tmp_path: Path) -> None:
    spec = tmp_path / "local.yaml"
    spec.write_text(LOCAL_YAML)
    kube = _eo("validate", str(spec))
    assert kube.returncode == 3 and "Traceback" not in kube.stderr
    assert "spec.sinks[0].postgres.dsn.env: " in kube.stderr
    assert "spec.checkpoint.location: /ckpt is not on the driver's volume" in kube.stderr
    local = _eo("validate", "--for", "local", str(spec))
    assert local.returncode == 0, local.stderr
    assert local.stdout == f"OK {spec}: default/ledger (exactly-once, for local)\n"


def test_validate_refuses_what_the_api_server_would(tmp_path: Path) -> None:
    spec = tmp_path / "loose.yaml"
    spec.write_text(
        LOCAL_YAML.replace("/in, format", "/in, format: csv, format")
        + "  executors: {instances: '3'}\n  suspend: 'yes'\n"
    )
    result = _eo("validate", "--for", "local", str(spec))
    assert result.returncode == 3
    assert "spec.source.files.format: duplicate key" in result.stderr
    spec.write_text(LOCAL_YAML + "  executors: {instances: '3'}\n  suspend: 'yes'\n")
    result = _eo("validate", "--for", "local", str(spec))
    assert "spec.executors.instances: '3' is a string" in result.stderr
    assert "spec.suspend: 'yes' is a string" in result.stderr


def test_validate_checks_the_transform_sql(tmp_path: Path) -> None:
    spec = tmp_path / "sql.yaml"
    spec.write_text(LOCAL_YAML + '  transform: {sql: "SELECT id, amount FROM source"}\n')
    result = _eo("validate", "--for", "local", str(spec))
    assert result.returncode == 3
    assert "spec.transform.sql: column amount is not in the source schema" in result.stderr
