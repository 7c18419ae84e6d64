"""The operator audits each pipeline on its interval and shows the result (issue 28).

The real Reconciler against the real API server and PostgreSQL: batches are decided through the
real protocol (tests/audit/harness.py), then reconcile passes run real audit passes; a test
clock stands for the interval passing.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from eo_jobs.protocol.gid import query_token
from tests.audit import harness as audit_harness
from tests.operator.reconcile_env import NAME, Scene
from tests.protocol import harness

AUDIT = {"appendOnly": ["ledger"]}
LEDGER = {"dsn": {"secretKeyRef": {"name": "ledger-db", "key": "dsn"}}, "table": "public.ledger"}


class Clock:
    """The audit's clock: each ``tick`` is an interval passing."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def tick(self) -> None:
        self.now += timedelta(hours=1)


def _start(scene: Scene, batches: range, sums: bool = False, **audit: Any) -> Clock:
    """Batches decided before the pipeline exists, then the suspended pipeline settled; with
    ``sums`` its ledger declares sumColumns and each decision records them."""
    with psycopg.connect(scene.dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE public.ledger")
    _drive(scene, batches, sums)
    clock = Clock()
    scene.reconciler.audits.clock = clock
    scene.reconciler.settings = replace(
        scene.reconciler.settings, health_interval=0.0, idle_health_interval=0.0
    )
    extra: dict[str, Any] = {}
    if sums:
        extra["sinks"] = [
            {"name": "ledger", "postgres": {**LEDGER, "sumColumns": ["amount_cents"]}}
        ]
    scene.apply(audit={**AUDIT, **audit}, **extra)
    for _ in range(6):
        scene.reconcile()
    assert scene.get()["status"]["phase"] == "Suspended"
    return clock


def _drive(scene: Scene, batches: range, sums: bool = False) -> None:
    coord = harness.coordinator(scene.dsn, 1, scene.key)
    coord.control.ensure_schema()
    with psycopg.connect(scene.dsn, autocommit=True) as conn:
        fence = conn.execute("SELECT epoch FROM eo.fence").fetchone()
    if fence is None:
        coord.startup()
    else:  # the operator fenced it since: a driver of the current epoch decides
        coord = harness.coordinator(scene.dsn, int(fence[0]), scene.key)
        coord.owner = scene.get()["metadata"]["uid"]
    recorded = audit_harness.ledger_sums if sums else None
    audit_harness.drive(scene.dsn, batches, coord=coord, sums=recorded)


def _pass(scene: Scene, clock: Clock) -> dict[str, Any]:
    clock.tick()
    scene.reconcile()
    return dict(scene.get()["status"])


def _damaged(scene: Scene, damage: str) -> tuple[Clock, dict[str, Any]]:
    """Batches 0..4 audited clean, 5..9 decided, ``damage`` done, then one pass: its status."""
    clock = _start(scene, range(5))
    _drive(scene, range(5, 10))
    audit_harness.sql(scene.dsn, damage)
    return clock, _pass(scene, clock)


def _audited(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Audited")


def _metric(scene: Scene, name: str, **labels: str) -> float | None:
    text = scene.reconciler.metrics.exposition().decode()
    wanted = {"namespace": scene.namespace, "pipeline": NAME, **labels}
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if match and dict(re.findall(r'(\w+)="([^"]*)"', match[1])) == wanted:
            return float(match[2])
    return None


def test_a_clean_pipeline_is_audited_true_naming_the_batches_and_checks(
    reconcile_scene: Scene,
) -> None:
    scene = reconcile_scene
    _start(scene, range(10))
    status = scene.get()["status"]
    audited = _audited(status)
    assert (audited["status"], audited["reason"]) == ("True", "NoViolation")
    assert "10 batches audited up to batch 9" in audited["message"]
    assert "participants" in audited["message"] and "table-count" in audited["message"]
    assert status["audit"]["lastAuditedBatch"] == 9
    assert status["audit"]["position"]["batches"] == {query_token(harness.QUERY): 9}
    assert _metric(scene, "eo_audit_batches_total") == 10
    assert _metric(scene, "eo_audit_last_batch") == 9
    assert _metric(scene, "eo_audit_lag_batches") == 0
    assert _metric(scene, "eo_audit_interval_seconds") == 300
    assert _metric(scene, "eo_audit_violations_total", check="participants") == 0
    # The auditing thread's own CPU: some, and no more than the pass's wall time.
    cpu = _metric(scene, "eo_audit_cpu_seconds_total")
    wall = _metric(scene, "eo_audit_pass_duration_seconds_sum")
    assert cpu is not None and wall is not None and 0 < cpu <= wall
    # The driver's marker pruning now stops at the audited position.
    with psycopg.connect(scene.dsn) as conn:
        assert conn.execute("SELECT query, batch_id FROM eo.audited").fetchall() == [
            (query_token(harness.QUERY), 9)
        ]


def test_a_deleted_marker_turns_audited_false_naming_batch_and_check_until_acknowledged(
    reconcile_scene: Scene,
) -> None:
    scene = reconcile_scene
    clock, status = _damaged(
        scene, "DELETE FROM eo.markers WHERE batch_id = 7 AND gid LIKE 'eo1:%'"
    )
    audited = _audited(status)
    assert (audited["status"], audited["reason"]) == ("False", "Violation")
    assert audited["message"].startswith("batch 7: participants failed")
    assert status["audit"]["violation"]["batch"] == 7
    assert "AuditViolation: batch 7: participants failed" in scene.events()
    assert (_metric(scene, "eo_audit_violations_total", check="participants") or 0) >= 1
    assert _metric(scene, "eo_audit_violation_latched", check="participants") == 1
    assert status["audit"]["lastAuditedBatch"] == 9  # the position moved on

    status = _pass(scene, clock)  # a clean pass does not clear it: it is latched
    assert _audited(status)["status"] == "False"
    acknowledged = clock.now.isoformat()
    scene.cluster.kubectl(
        "annotate", "eop", NAME, "-n", scene.namespace,
        f"eo.dev/audit-acknowledged={acknowledged}", "--overwrite",
    )  # fmt: skip
    status = _pass(scene, clock)
    assert _audited(status)["status"] == "True"
    assert status["audit"].get("violation") is None
    assert "AuditRecovered: no violation" in scene.events()
    assert _metric(scene, "eo_audit_violation_latched", check="participants") == 0


def test_a_row_inserted_twice_turns_audited_false_with_the_count_check(
    reconcile_scene: Scene,
) -> None:
    scene = reconcile_scene
    _clock, status = _damaged(
        scene, "INSERT INTO public.ledger SELECT * FROM public.ledger WHERE id = 6000"
    )
    audited = _audited(status)
    assert audited["status"] == "False"
    assert status["audit"]["violation"]["check"] == "table-count"
    assert "table-count failed" in audited["message"]
    assert _metric(scene, "eo_audit_violations_total", check="table-count") == 1


def test_the_sum_baseline_kept_in_status_catches_an_amount_changed_in_an_audited_batch(
    reconcile_scene: Scene,
) -> None:
    scene = reconcile_scene
    clock = _start(scene, range(5), sums=True)
    status = scene.get()["status"]
    total = sum(sum(r[2] for r in harness.batch_rows(b)) for b in range(5))
    assert status["audit"]["position"]["tableSums"] == {"ledger": {"amount_cents": str(total)}}
    assert _audited(status)["status"] == "True"
    # Batch 1, audited in the last pass, changed after the fact; later batches decided.
    changed = (
        "UPDATE public.ledger SET amount_cents = amount_cents + 5 "
        "WHERE id = (SELECT min(id) FROM public.ledger WHERE batch_id = 1)"
    )
    audit_harness.sql(scene.dsn, changed)
    _drive(scene, range(5, 8), sums=True)

    status = _pass(scene, clock)

    assert _audited(status)["status"] == "False"
    assert status["audit"]["violation"]["check"] == "sum-columns"
    assert "amount_cents" in status["audit"]["violation"]["evidence"]


def test_a_baseline_the_pass_dropped_leaves_status_and_a_new_one_is_taken_when_declared_again(
    reconcile_scene: Scene,
) -> None:
    """Status is merge-patched: a key missing from the new position would stay. A sum baseline
    kept from before sumColumns were dropped would then be used when they come back, against
    batches that recorded no sums: a violation no damage made."""
    scene = reconcile_scene
    clock = _start(scene, range(5), sums=True)
    assert set(scene.get()["status"]["audit"]["position"]["tableSums"]) == {"ledger"}
    scene.apply(audit=AUDIT)  # sumColumns no longer declared
    _drive(scene, range(5, 8))

    status = _pass(scene, clock)

    assert status["audit"]["position"]["tableSums"] == {}
    summed = [{"name": "ledger", "postgres": {**LEDGER, "sumColumns": ["amount_cents"]}}]
    scene.apply(audit=AUDIT, sinks=summed)
    _drive(scene, range(8, 10), sums=True)
    status = _pass(scene, clock)
    assert _audited(status)["status"] == "True", status["audit"]
    status = _pass(scene, clock)  # the new baseline, now checked
    assert _audited(status)["status"] == "True", status["audit"]
    assert set(status["audit"]["position"]["tableSums"]) == {"ledger"}


def test_passes_are_bounded_and_resume_from_the_saved_position(reconcile_scene: Scene) -> None:
    scene = reconcile_scene
    clock = _start(scene, range(10), maxBatchesPerPass=4)
    status = scene.get()["status"]
    assert (status["audit"]["lastAuditedBatch"], status["audit"]["lagBatches"]) == (3, 6)
    assert _metric(scene, "eo_audit_lag_batches") == 6
    status = _pass(scene, clock)
    assert (status["audit"]["lastAuditedBatch"], status["audit"]["batchesLastPass"]) == (7, 4)
    status = _pass(scene, clock)
    assert (status["audit"]["lastAuditedBatch"], status["audit"]["batchesAudited"]) == (9, 10)
    assert "10 batches audited up to batch 9" in _audited(status)["message"]
    assert _metric(scene, "eo_audit_batches_total") == 10


def test_no_pass_runs_before_the_interval(reconcile_scene: Scene) -> None:
    scene = reconcile_scene
    _start(scene, range(3), intervalSeconds=3600)
    before = scene.get()["status"]["audit"]["lastPassTime"]
    _drive(scene, range(3, 6))
    scene.reconcile()  # the clock did not move
    assert scene.get()["status"]["audit"]["lastPassTime"] == before
    assert scene.get()["status"]["audit"]["lastAuditedBatch"] == 2


@pytest.mark.parametrize("deleted", [False, True])
def test_switching_the_audit_off_or_deleting_the_pipeline_drops_its_series(
    reconcile_scene: Scene, deleted: bool
) -> None:
    scene = reconcile_scene
    _start(scene, range(3))
    assert _metric(scene, "eo_audit_last_batch") == 2
    if deleted:
        scene.reconciler.finalize(scene.namespace, NAME)  # the finalizer's work
    else:
        scene.apply(audit={"enabled": False})
        scene.reconcile()
        status = scene.get()["status"]
        assert "audit" not in status
        assert all(c["type"] != "Audited" for c in status["conditions"])
    with psycopg.connect(scene.dsn) as conn:  # markers are no longer held for it
        assert conn.execute("SELECT count(*) FROM eo.audited").fetchone() == (0,)
    assert _metric(scene, "eo_audit_last_batch") is None
    assert _metric(scene, "eo_audit_batches_total") is None


@pytest.mark.parametrize(
    ("audit", "refusal"),
    [
        ({"appendOnly": ["nosuch"]}, "audit.appendOnly may name only sinks of this pipeline"),
        ({"batchColumns": {"ledger": "batch_id"}}, "must also be in audit.appendOnly"),
        ({"intervalSeconds": 5}, "spec.audit.intervalSeconds"),
        ({"maxBatchesPerPass": 0}, "spec.audit.maxBatchesPerPass"),
    ],
)
def test_the_api_server_refuses_an_audit_that_cannot_work_naming_the_field(
    reconcile_scene: Scene, audit: dict[str, Any], refusal: str
) -> None:
    scene = reconcile_scene
    with pytest.raises(RuntimeError) as refused:
        scene.apply(audit=audit)
    assert refusal in str(refused.value)
