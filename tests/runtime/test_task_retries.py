"""Spark retries of writer tasks: a failed attempt's prepared transaction never blocks its retry."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from tests.runtime import harness

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("writer", ["jvm", "python"])
def test_an_upsert_task_that_fails_after_prepare_is_retried_without_waiting_on_its_locks(
    tmp_path: Path, pg_dsn: str, writer: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE public.accounts (id bigint PRIMARY KEY, balance bigint, version bigint)"
        )
    folder = tmp_path / "in"
    folder.mkdir()
    lines = [json.dumps({"id": i % 40, "balance": i, "version": i}) for i in range(200)]
    (folder / "part-0.json").write_text("\n".join(lines) + "\n")
    spec = tmp_path / "pipeline.yaml"
    spec.write_text(f"""apiVersion: eo.dev/v1alpha1
kind: ExactlyOncePipeline
metadata: {{name: orders, namespace: test}}
spec:
  source:
    files: {{path: "{folder}", format: json, schema: "id BIGINT, balance BIGINT, version BIGINT"}}
  sinks:
    - name: accounts
      postgres: {{dsn: {{env: TEST_DSN}}, table: public.accounts, writerPartitions: 2,
                 mode: upsert, keyColumns: [id], versionColumn: version}}
  checkpoint: {{location: "{tmp_path / "checkpoint"}", triggerIntervalSeconds: 0}}
  driver: {{cores: 2, memory: 768m}}
""")
    chosen = {"EO_WRITER": "python" if writer == "python" else "auto"}
    out = harness.run_past_a_failed_attempt(spec, pg_dsn, chosen)
    events = [json.loads(line) for line in out.splitlines() if line.startswith('{"event"')]
    assert [e["path"] for e in events if e["event"] == "writer"] == [writer]
    with psycopg.connect(pg_dsn) as conn:
        rows = dict(conn.execute("SELECT id, balance FROM public.accounts").fetchall())
        left = conn.execute(
            "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()"
        ).fetchone()
    assert rows == {k: 160 + k for k in range(40)}
    assert left == (0,)


def test_a_jvm_writer_task_that_fails_after_prepare_is_retried_and_its_attempt_rolled_back(
    tmp_path: Path, pg_dsn: str
) -> None:
    """Append through the JVM writer into a table with a unique key: the failed attempt's
    prepared rows would hold their key locks until the retry timed out, so the retry passing
    shows the sweep rolled the attempt back by its gid (partition, task attempt id)."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE public.orders (order_id bigint PRIMARY KEY, merchant text, "
            "amount_cents bigint)"
        )
    truth = harness.write_files(
        tmp_path / "in", files=2, per_file=100, start=1, malformed_every=999
    )
    spec = harness.files_pipeline(tmp_path)
    out = harness.run_past_a_failed_attempt(spec, pg_dsn)
    events = [json.loads(line) for line in out.splitlines() if line.startswith('{"event"')]
    assert [e["path"] for e in events if e["event"] == "writer"] == ["jvm"]
    harness.assert_exact(pg_dsn, truth)
    with psycopg.connect(pg_dsn) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()"
        ).fetchone()
    assert left == (0,)
