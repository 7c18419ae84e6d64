"""One real `eo run` (Spark, the JVM writer, a malformed record read again into a dead letter):
the audit of what it left passes every check it can run, with the real checkpoint, and names a
file its source log is then made to read twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eo_jobs.audit import AuditTarget, Check, SinkTarget, Status, audit
from tests.runtime import harness

pytestmark = pytest.mark.spark


def test_a_real_drivers_log_passes_and_a_file_read_twice_is_named(
    tmp_path: Path, pg_dsn: str
) -> None:
    harness.create_table(pg_dsn)
    truth = harness.write_files(tmp_path / "in", files=6, per_file=50, malformed_every=120)
    spec = harness.files_pipeline(tmp_path)
    code, out = harness.run(spec, 1, pg_dsn)
    assert code == 0, out
    harness.assert_exact(pg_dsn, truth)
    checkpoint = tmp_path / "checkpoint"
    target = AuditTarget(
        "test/orders",
        pg_dsn,
        (SinkTarget("orders", pg_dsn, "public.orders", append_only=True),),
        checkpoint=str(checkpoint),
    )
    result = audit(target)
    assert result.ok, result.violations
    assert result.batches >= 3
    statuses = {(c.check, c.subject): c.status for c in result.checks}
    for key in [
        (Check.DECISION_LOG, "control database"),
        (Check.SOURCE_COVERAGE, "decision log"),
        (Check.SOURCE_COVERAGE, "checkpoint offsets"),
        (Check.SOURCE_FILES, "checkpoint"),
        (Check.PARTICIPANTS, "sink databases"),
        (Check.ORPHAN_MARKERS, "sink databases"),
        (Check.TABLE_COUNT, "orders (public.orders)"),
    ]:
        assert statuses[key] is Status.RAN, (key, result.checks)

    log = checkpoint / "sources" / "0"
    entries = sorted(int(p.name) for p in log.iterdir() if p.name.isdigit())
    first = json.loads((log / str(entries[0])).read_text().splitlines()[1])
    last = log / str(entries[-1])
    again = dict(first, batchId=entries[-1])
    last.write_text(last.read_text().rstrip("\n") + "\n" + json.dumps(again) + "\n")
    tampered = audit(target)
    files = [v for v in tampered.violations if v.check is Check.SOURCE_FILES]
    assert len(files) == 1 and first["path"] in files[0].evidence
    assert files[0].batch == max(result.last_batch.values())
