"""The recovery commands on a pipeline whose only database is MariaDB (no spec.control, no
PostgreSQL): ``eo recover``, ``eo sweep``, ``eo release-fence`` and ``eo forget-query`` work on
the MySQL control tables in the sink's database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eo_jobs.cli import main
from eo_jobs.protocol.mysql_control import MySqlControlStore
from tests.support.mariadb import MariaDbDatabase

PIPELINE = "ns/only-mysql"


def _spec(tmp_path: Path, db: MariaDbDatabase) -> Path:
    spec = tmp_path / "pipeline.yaml"
    spec.write_text(f"""apiVersion: eo.dev/v1alpha1
kind: ExactlyOncePipeline
metadata: {{name: only-mysql, namespace: ns}}
spec:
  source:
    files: {{path: /in, format: json, schema: "id BIGINT"}}
  sinks:
    - name: ledger
      mysql: {{dsn: {{env: LEDGER_DSN}}, table: {db.name}.ledger}}
  checkpoint: {{location: /tmp/checkpoint}}
""")
    return spec


def test_recover_sweep_release_and_forget_run_on_the_mysql_control_tables(
    tmp_path: Path,
    mariadb_db: MariaDbDatabase,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    conn = mariadb_db.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE ledger (id BIGINT) ENGINE=InnoDB")
    conn.close()
    monkeypatch.delenv("EO_CONTROL_DSN", raising=False)
    monkeypatch.setenv("LEDGER_DSN", mariadb_db.dsn)
    spec = str(_spec(tmp_path, mariadb_db))

    assert main(["recover", spec, "--epoch", "3", "--fence-owner", "uid-1"]) == 0
    control = MySqlControlStore(mariadb_db.dsn)
    fence = control.fence(PIPELINE)
    assert fence is not None and (fence.epoch, fence.owner) == (3, "uid-1")
    control.decide(
        pipeline=PIPELINE,
        query_id="q-old",
        batch_id=0,
        epoch=3,
        participants=[],
        source_offsets=None,
        rows_written=0,
        prepare_ms=0.0,
    )
    capsys.readouterr()
    assert main(["sweep", spec]) == 0
    assert json.loads(capsys.readouterr().out)["left"] == 0
    assert main(["release-fence", spec, "--owner", "uid-1"]) == 0
    fence = control.fence(PIPELINE)
    assert fence is not None and (fence.epoch, fence.owner) == (3, None)
    assert main(["forget-query", spec, "--query-id", "q-old", "--yes"]) == 0
    assert control.queries(PIPELINE) == []
    control.close()
