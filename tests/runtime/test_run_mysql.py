"""`eo run` into a MariaDB sink: files -> transform -> MariaDB through XA branches, decided in
the PostgreSQL control database, with real SIGKILLs at crash points inside the writer tasks and
after the decision; and a PostgreSQL sink beside a MariaDB one under one decision per batch."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import pytest
from tests.runtime import harness
from tests.support.mariadb import MariaDbDatabase

from eo_jobs.audit import Check, Status, audit
from eo_jobs.audit.targets import target_for
from eo_jobs.protocol.mysql_xa import FORMAT_ID
from eo_jobs.spec.loading import load_pipeline

pytestmark = pytest.mark.spark

MYSQL_DDL = (
    "CREATE TABLE orders (order_id BIGINT NOT NULL, merchant VARCHAR(64), "
    "amount_cents BIGINT) ENGINE=InnoDB"
)


def mysql_sink(db: MariaDbDatabase, name: str = "orders") -> str:
    """The YAML list item of a MariaDB sink (DSN from ``MYSQL_DSN``)."""
    return (
        f"    - name: {name}\n"
        f"      mysql: {{dsn: {{env: MYSQL_DSN}}, table: {db.name}.orders, writerPartitions: 2}}\n"
    )


def only_mysql_pipeline(work: Path, db: MariaDbDatabase) -> Path:
    """``harness.files_pipeline`` with the orders sink in MariaDB and the control database in
    PostgreSQL (``TEST_DSN``); dead letters go to MariaDB's ``orders_dead_letter``."""
    spec = harness.files_pipeline(work)
    text = spec.read_text()
    start = text.index("    - name: orders\n")
    end = text.index("  checkpoint:")
    text = text[:start] + mysql_sink(db) + text[end:]
    text = text.replace("  sinks:\n", "  control: {dsn: {env: TEST_DSN}}\n  sinks:\n")
    spec.write_text(text)
    return spec


def mysql_audit(db: MariaDbDatabase, truth: harness.Truth) -> dict[str, int]:
    """The MariaDB sink against the generated truth; duplicates and gaps apart."""
    conn = db.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT order_id, amount_cents FROM orders")
            rows = list(cur.fetchall())
            cur.execute("SELECT count(*) FROM orders_dead_letter")
            (dead,) = cur.fetchone() or (-1,)
            cur.execute("XA RECOVER")
            ours = [r for r in cur.fetchall() if int(r[0]) == FORMAT_ID]
    finally:
        conn.close()
    counts = Counter(int(r[0]) for r in rows)
    amounts = {int(r[0]): int(r[1]) for r in rows}
    return {
        "rows": len(rows),
        "duplicates": sum(c - 1 for c in counts.values()),
        "missing": sum(1 for k in truth.valid if k not in counts),
        "unexpected": sum(1 for k in counts if k not in truth.valid),
        "wrong_amounts": sum(1 for k, v in truth.valid.items() if amounts.get(k, v) != v),
        "dead_letters": int(dead),
        "prepared_left": len(ours),
    }


def exact(truth: harness.Truth) -> dict[str, int]:
    return {
        "rows": len(truth.valid),
        "duplicates": 0,
        "missing": 0,
        "unexpected": 0,
        "wrong_amounts": 0,
        "dead_letters": truth.malformed,
        "prepared_left": 0,
    }


def writer_events(out: str) -> list[tuple[str, str]]:
    """The driver's ``writer`` events: (sink, path)."""
    events = [
        json.loads(line) for line in out.splitlines() if line.startswith('{"event": "writer"')
    ]
    return [(e["sink"], e["path"]) for e in events]


@pytest.mark.parametrize("writer", ["jvm", "python"])
def test_a_mariadb_sink_is_exact_through_kills_inside_the_tasks_and_after_the_decision(
    tmp_path: Path, pg_dsn: str, mariadb_db: MariaDbDatabase, writer: str
) -> None:
    """The writer tasks' branches are the JVM's (``dev.eo.writer.mysql``) or, with
    ``EO_WRITER=python``, Python's: either way a SIGKILL right after the first task's
    ``XA PREPARE`` and another after the decision leave the table exact."""
    conn = mariadb_db.connect()
    with conn.cursor() as cur:
        cur.execute(MYSQL_DDL)
    conn.close()
    truth = harness.write_files(tmp_path / "in", files=6, per_file=60)
    spec = only_mysql_pipeline(tmp_path, mariadb_db)
    env = {"MYSQL_DSN": mariadb_db.dsn, **({"EO_WRITER": "python"} if writer == "python" else {})}
    runs = [
        {"EO_FAULT_POINT": "after-some-prepared", "EO_FAULT_BATCH": "1"},
        {"EO_FAULT_POINT": "after-decision", "EO_FAULT_BATCH": "2"},
    ]
    outputs = []
    for epoch, fault in enumerate(runs, start=1):
        code, out = harness.run(spec, epoch, pg_dsn, extra_env={**env, **fault})
        assert code == -signal.SIGKILL, out
        outputs.append(out)
    code, out = harness.run(spec, len(runs) + 1, pg_dsn, extra_env=env)
    assert code == 0, out
    # The sink's tasks are the chosen writer's, chosen once per driver that writes (the last
    # one only replays batch 2, decided before the second kill).
    for found in outputs:
        assert writer_events(found) == [("orders", writer)], found
    # The batch decided before the second kill is committed by the third driver's recovery.
    assert '"event": "recovered"' in out and '"batch": 2, "decided_by_epoch": 2' in out, out
    assert mysql_audit(mariadb_db, truth) == exact(truth)

    # The continuous audit reads MariaDB's markers, branches and table: clean, then a row
    # deleted behind eo's back is a table-count violation of the sink.
    target = target_for(
        load_pipeline(spec),
        {"orders": mariadb_db.dsn},
        pg_dsn,
        append_only=["orders"],
        checkpoint=str(tmp_path / "checkpoint"),
    )
    clean = audit(target)
    assert clean.ok, clean.violations
    ran = {(c.check, c.status) for c in clean.checks}
    assert (Check.TABLE_COUNT, Status.RAN) in ran and (Check.PARTICIPANTS, Status.RAN) in ran
    conn = mariadb_db.connect()
    with conn.cursor() as cur:
        cur.execute("DELETE FROM orders LIMIT 1")
    conn.close()
    broken = audit(target)
    assert [v.check for v in broken.violations] == [Check.TABLE_COUNT], broken.violations


def test_a_postgres_and_a_mariadb_sink_show_every_batch_together_through_a_kill(
    tmp_path: Path, pg_dsn: str, mariadb_db: MariaDbDatabase
) -> None:
    harness.create_table(pg_dsn)
    conn = mariadb_db.connect()
    with conn.cursor() as cur:
        cur.execute(MYSQL_DDL)
    conn.close()
    truth = harness.write_files(tmp_path / "in", files=4, per_file=50)
    spec = harness.files_pipeline(tmp_path, more_sinks=mysql_sink(mariadb_db, "copy"))
    env = {"MYSQL_DSN": mariadb_db.dsn}
    fault = {"EO_FAULT_POINT": "after-some-prepared", "EO_FAULT_BATCH": "1"}
    code, out = harness.run(spec, 1, pg_dsn, extra_env={**env, **fault})
    assert code == -signal.SIGKILL, out
    code, out = harness.run(spec, 2, pg_dsn, extra_env=env)
    assert code == 0, out
    harness.assert_exact(pg_dsn, truth)  # dead letters: the first sink's (PostgreSQL) table
    found = mysql_audit_rows_only(mariadb_db, truth)
    assert found == {**exact(truth), "dead_letters": 0}


def mysql_audit_rows_only(db: MariaDbDatabase, truth: harness.Truth) -> dict[str, int]:
    """``mysql_audit`` of a sink that is not first (its database holds no dead letters)."""
    conn = db.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS orders_dead_letter (x INT)")
    conn.close()
    return mysql_audit(db, truth)


def test_a_mariadb_upsert_sink_keeps_the_highest_version_per_key_and_refused_rows_are_dead_letters(
    tmp_path: Path, pg_dsn: str, mariadb_db: MariaDbDatabase
) -> None:
    """Mode upsert by merchant, versionColumn order_id, through a kill inside the tasks: each
    merchant's row is the winner (highest order_id) of the last batch whose winner the table
    took. The table's CHECK refuses two winners (order ids 239 and 359): they are dead letters
    in MariaDB's dead-letter table with the server's reason, once each, and the row they would
    have replaced stays (a lower version of the same batch never stands in for its winner)."""
    refused_ids = (239, 359)
    conn = mariadb_db.connect()
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE latest (merchant VARCHAR(16) PRIMARY KEY, order_id BIGINT, "
            "amount_cents BIGINT, CONSTRAINT refusing CHECK (order_id NOT IN (239, 359))) "
            "ENGINE=InnoDB"
        )
    conn.close()
    truth = harness.write_files(tmp_path / "in", files=6, per_file=60)
    spec = only_mysql_pipeline(tmp_path, mariadb_db)
    text = spec.read_text().replace(
        f"table: {mariadb_db.name}.orders,",
        f"table: {mariadb_db.name}.latest, mode: upsert, keyColumns: [merchant], "
        "versionColumn: order_id,",
    )
    spec.write_text(text)
    env = {"MYSQL_DSN": mariadb_db.dsn}
    fault = {"EO_FAULT_POINT": "after-some-prepared", "EO_FAULT_BATCH": "1"}
    code, out = harness.run(spec, 1, pg_dsn, extra_env={**env, **fault})
    assert code == -signal.SIGKILL, out
    code, out = harness.run(spec, 2, pg_dsn, extra_env=env)
    assert code == 0, out

    # Two files of 60 records per batch: batch b holds order ids 120b .. 120b + 119.
    expected: dict[str, tuple[int, int]] = {}
    for batch in range(3):
        ids = [i for i in truth.valid if 120 * batch <= i < 120 * (batch + 1)]
        for merchant in range(5):
            winner = max(i for i in ids if i % 5 == merchant)
            if winner not in refused_ids:
                expected[f"m{merchant}"] = (winner, truth.valid[winner])
    conn = mariadb_db.connect()
    with conn.cursor() as cur:
        cur.execute("SELECT merchant, order_id, amount_cents FROM latest")
        found = {str(m): (int(o), int(a)) for m, o, a in cur.fetchall()}
        cur.execute("SELECT raw, reason FROM latest_dead_letter WHERE reason LIKE '%refusing%'")
        letters = [(str(raw), str(reason)) for raw, reason in cur.fetchall()]
        cur.execute("SELECT count(*) FROM latest_dead_letter")
        (total,) = cur.fetchone() or (-1,)
    conn.close()
    assert found == expected
    # Each refused winner once (the killed attempt's letters rolled back with its branch),
    # the malformed lines once too.
    assert sorted(json.loads(raw)["order_id"] for raw, _ in letters) == list(refused_ids)
    assert all("4025" in reason for _, reason in letters), letters  # ER_CONSTRAINT_FAILED
    assert total == len(refused_ids) + truth.malformed


def test_a_jvm_mysql_task_that_fails_after_prepare_is_retried_and_its_branch_rolled_back(
    tmp_path: Path, pg_dsn: str, mariadb_db: MariaDbDatabase
) -> None:
    """Append through the JVM writer into a MariaDB table with a primary key: the failed
    attempt's prepared branch would hold its key locks until the retry's lock wait timed out,
    so the retry passing shows the sweep rolled the branch back by the xid of its gid."""
    conn = mariadb_db.connect()
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE orders (order_id BIGINT NOT NULL PRIMARY KEY, merchant VARCHAR(64), "
            "amount_cents BIGINT) ENGINE=InnoDB"
        )
    conn.close()
    truth = harness.write_files(
        tmp_path / "in", files=2, per_file=100, start=1, malformed_every=999
    )
    spec = only_mysql_pipeline(tmp_path, mariadb_db)
    out = harness.run_past_a_failed_attempt(spec, pg_dsn, {"MYSQL_DSN": mariadb_db.dsn})
    assert writer_events(out) == [("orders", "jvm")], out
    assert mysql_audit(mariadb_db, truth) == exact(truth)
