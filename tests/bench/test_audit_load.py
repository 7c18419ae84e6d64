"""The scale bench's audit load: batches written through eo's protocol that the real auditor
reads as a driver's, a feeder that follows the fence the operator raises, and the cost table
built from the on and off rows. No figure is compared with a threshold."""

from __future__ import annotations

import time
from dataclasses import replace

import psycopg
from bench.audit_load import AUDIT_COLUMN, Feeder, PipelineWriter, create_tables, seed, table_of
from bench.operator_scale import Row, audit_cost, manifest, table

from eo_jobs.audit import AuditTarget, Check, SinkTarget, Status, audit
from eo_jobs.protocol.control import ControlStore

OWNER = "uid-of-the-pipeline-object"


def _target(dsn: str, writer: PipelineWriter) -> AuditTarget:
    sink = SinkTarget(
        "orders", dsn, table_of(writer.name), batch_column=AUDIT_COLUMN, batch_column_by_eo=True
    )
    return AuditTarget(writer.key, dsn, (sink,))


def test_seeded_and_fed_batches_audit_clean_and_the_feeder_follows_a_raised_fence(
    pg_dsn: str,
) -> None:
    writers = [PipelineWriter(f"scale/p{i}", f"p{i}", pg_dsn, rows=10) for i in range(2)]
    create_tables(pg_dsn, [w.name for w in writers])
    seed(writers, batches=3, threads=2)
    # The operator claims the free fence for the object (its UID) at a new epoch.
    store = ControlStore(pg_dsn)
    store.raise_fence(writers[0].key, 2, OWNER)
    feeder = Feeder([writers[0]], every=0.2)
    feeder.start()
    deadline = time.monotonic() + 60
    while feeder.batches < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    store.raise_fence(writers[0].key, 3, OWNER)  # the stand-in relaunched
    fenced_at = feeder.batches
    while feeder.batches < fenced_at + 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    feeder.stop()
    store.close()
    assert feeder.batches >= fenced_at + 2, (feeder.batches, feeder.fenced)

    fed, idle = audit(_target(pg_dsn, writers[0])), audit(_target(pg_dsn, writers[1]))
    assert fed.ok and idle.ok, (fed.violations, idle.violations)
    assert idle.batches == 3 and fed.batches == writers[0].next_batch >= 5
    for result in (fed, idle):
        ran = {c.check for c in result.checks if c.status is Status.RAN}
        assert {Check.DECISION_LOG, Check.PARTICIPANTS, Check.BATCH_COLUMN} <= ran
    with psycopg.connect(pg_dsn) as conn:
        epochs = {
            r[0]
            for r in conn.execute(
                "SELECT epoch FROM eo.decisions WHERE pipeline = %s", (writers[0].key,)
            )
        }
    assert epochs == {1, 2, 3}, epochs


def test_the_manifest_carries_the_audit_switch_and_the_tables_name_their_columns() -> None:
    from pathlib import Path

    doc = manifest("p00001", Path("/w"), None, audit=False, interval=60)
    assert doc["spec"]["audit"] == {"enabled": False, "intervalSeconds": 60}
    assert doc["spec"]["sinks"][0]["postgres"]["auditColumn"] == AUDIT_COLUMN
    on = Row(100, 5, 9.0, 160, 20.0, 14, 50, 10, 1, 9, 19, 25, 3.0, "on", 1.5, 12.0, 0.1, 6.0, 40)
    off = replace(on, audit="off", cpu_percent=12.0, rss_mib=150, audit_passes_per_s=0.0)
    assert "| passes/s | audited/s | pass s | audit CPU % | CPU ms/pass |" in table([on, off])
    cost = audit_cost([on, off], interval=60).splitlines()
    # 6 % of a core in audit threads at 12 batches/s: 5.0 ms a batch; 1.2 % at 300 s.
    assert cost[-1] == "| 100 | 6.0 | 40 | 5.0 | 1.2 | 20 / 12 | 160 / 150 |", cost


def test_counters_of_series_that_vanish_do_not_count_as_a_fall() -> None:
    from bench.operator_scale import _increases

    a = ("eo_audit_batches_total", (("pipeline", "a"),))
    b = ("eo_audit_batches_total", (("pipeline", "b"),))
    c = ("eo_audit_batches_total", (("pipeline", "c"),))
    grown = _increases({a: 5.0, b: 7.0}, {a: 9.0, c: 3.0})
    assert grown["eo_audit_batches_total"] == 4.0
