"""Issue 29 item 5: the bench's MySQL variants write the same events into a MariaDB server the
bench starts, and their tables are audited exactly against the events.

Correctness only, never timings: a tiny run of both variants audits exact and reports the
ratio under stable JSON names; the MariaDB audit counts duplicates, gaps, wrong values and
prepared branches apart, so a table that is not exact cannot pass for one.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from tests.support.mariadb import connection_id, wait_disconnected

from bench import compare, data, mysql_sink, readme_table, variants
from eo_jobs.mariadbserver import MariaDbDatabase

SIZE = "1000x3"
VARIANT_FIELDS = {
    "variant",
    "rows_per_s",
    "rows_per_s_whole",
    "batches",
    "batch_p50_s",
    "decide_commit_p50_ms",
    "duplicates",
    "missing",
    "wrong",
    "in_doubt",
    "exact",
}


@pytest.mark.spark
@pytest.mark.slow
def test_both_mysql_variants_run_every_batch_and_audit_exact_in_mariadb(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "bench.json"
    code = compare.main(
        [
            "--sizes",
            SIZE,
            "--events-per-file",
            "500",
            "--variants",
            "exactly-once-mysql,spark-jdbc-mysql",
            "--no-protocol",
            "--recovery-size",
            "none",
            "--json",
            str(report),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out

    doc = json.loads(report.read_text())
    assert {"mariadb", "mariadb_jdbc", "pymysql"} <= set(doc["environment"])
    (size,) = doc["sizes"]
    rows = {row["variant"]: row for row in size["variants"]}
    assert sorted(rows) == ["exactly-once-mysql", "spark-jdbc-mysql"]
    for name, row in rows.items():
        assert set(row) >= VARIANT_FIELDS, name
        assert row["batches"] == 3, (name, row)
        assert (row["duplicates"], row["missing"], row["wrong"], row["in_doubt"]) == (
            0,
            0,
            0,
            0,
        ), (name, row)
        assert row["exact"] is True, (name, row)
    # eo's driver decided every batch (its protocol timings are there); the JDBC job has none.
    assert rows["exactly-once-mysql"]["decide_commit_p50_ms"] is not None
    assert rows["spark-jdbc-mysql"]["decide_commit_p50_ms"] is None
    assert size["ratios"][compare.MYSQL_RATIO] is not None
    assert size["ratios_whole_run"][compare.MYSQL_RATIO] is not None
    # Tables name the variants as the issue spells them; the README table has their columns.
    assert "| exactly-once (mysql) " in out and "| spark-jdbc (mysql) " in out, out
    assert "EO/JDBC (mysql)" in out
    table = readme_table.render(doc)
    assert "eo exactly-once (mysql) rows/s" in table and "EO/JDBC (mysql)" in table, table


XID = "X'62656e63686d79'"


def _row(order_id: int, **changed: object) -> tuple[object, ...]:
    """Order ``order_id`` as the generator made it (``changed``: fields replaced), as an INSERT
    into MariaDB under ``time_zone = '+00:00'`` takes it."""
    event = {**data.event(order_id), **changed}
    created = datetime.fromisoformat(str(event["created_at"])).astimezone(UTC)
    event["created_at"] = created.strftime("%Y-%m-%d %H:%M:%S")
    return tuple(event[column] for column in data.COLUMNS)


def test_the_mariadb_audit_counts_duplicates_gaps_wrong_values_and_prepared_branches_apart(
    mariadb_db: MariaDbDatabase,
) -> None:
    sink = mysql_sink.SinkTable(mariadb_db)
    mysql_sink.create_table(sink)
    events = 10
    rows = [_row(i) for i in range(events) if i not in (3, 7)]  # order 3 is a gap
    rows += [_row(5), _row(7, amount_cents=1), _row(100)]  # twice; a changed amount; never sent
    insert = (
        f"INSERT INTO {sink.quoted} ({', '.join(data.COLUMNS)}) VALUES (%s, %s, %s, %s, %s, %s)"
    )
    conn = mariadb_db.connect()
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.executemany(insert, rows)
        cur.execute("XA RECOVER")
        before = len(cur.fetchall())
        clean = mysql_sink.audit(sink, events)
        cur.execute(f"XA START {XID}")
        cur.execute(insert, _row(3))
        cur.execute(f"XA END {XID}")
        cur.execute(f"XA PREPARE {XID}")
    preparer = connection_id(conn)
    conn.close()  # the prepared branch outlives its connection
    wait_disconnected(mariadb_db.server, preparer)
    try:
        found = mysql_sink.audit(sink, events)
    finally:
        with mariadb_db.connect() as other, other.cursor() as cur:
            cur.execute(f"XA ROLLBACK {XID}")

    counts = {"rows": events + 1, "duplicates": 1, "missing": 1, "unexpected": 1, "wrong": 1}
    assert clean == data.Audit(**counts, in_doubt=before)
    assert not clean.exact and not found.exact
    # The prepared branch's row is not in the table yet; the branch itself is counted.
    assert found == data.Audit(**counts, in_doubt=before + 1)


def test_a_mysql_variants_pipeline_names_its_mariadb_table_and_the_postgresql_control(
    tmp_path: Path,
) -> None:
    shape = variants.Shape(tmp_path / "in", 2, 3, 2, "1g", mysql_table="bench.orders")
    for name in ("exactly-once-mysql", "spark-jdbc-mysql"):
        folder = tmp_path / name
        folder.mkdir()
        spec = variants.pipeline_file(folder, variants.BY_NAME[name], shape)
        doc = yaml.safe_load(spec.read_text())
        (sink,) = doc["spec"]["sinks"]
        assert sink["mysql"] == {
            "dsn": {"env": variants.MYSQL_DSN_ENV},
            "table": "bench.orders",
            "writerPartitions": 3,
        }
        assert doc["spec"]["control"] == {"dsn": {"env": variants.DSN_ENV}}


def test_the_mysql_target_is_eo_over_jdbc_into_mariadb_at_least_1_at_200k_rows() -> None:
    rows = [
        {"variant": "exactly-once-mysql", "rows_per_s": 90.0},
        {"variant": "spark-jdbc-mysql", "rows_per_s": 100.0},
        {"variant": "exactly-once", "rows_per_s": 300.0},
    ]
    ratios = compare.ratios(rows, "rows_per_s")
    assert ratios[compare.MYSQL_RATIO] == pytest.approx(0.9)
    sizes = [{"size": "medium", "ratios": ratios}]
    (target,) = [
        t for t in compare.targets(sizes, compare.Results({})) if t["target"].startswith("MySQL")
    ]
    assert (target["threshold"], target["met"]) == (1.0, False)
    assert "200k" in target["target"]
