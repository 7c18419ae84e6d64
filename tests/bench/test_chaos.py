"""Chaos: a seeded short run of every fault kind ends with zero violations, and the audit it
relies on does count what it must (a checker that cannot fail would prove nothing)."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from bench.chaos import audit
from bench.chaos.__main__ import main
from bench.chaos.faults import KINDS
from bench.chaos.stream import Stream, file_emitter
from tests.cluster.plugin import NEEDS_MOUNTS

from eo_jobs.protocol.control import ControlStore
from eo_jobs.protocol.faults import POINTS

REPO = Path(__file__).resolve().parents[2]
CRASH_POINT_SEED = 14
"""The operator-mode crash-point test's seed: its first draw picks ``before-prepare``."""


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("source", ["files", pytest.param("kafka", marks=pytest.mark.kafka)])
def test_a_seeded_run_of_every_fault_kind_ends_with_zero_violations(
    tmp_path: Path, source: str
) -> None:
    work = tmp_path / "chaos"
    result = subprocess.run(
        [
            sys.executable,
            *("-m", "bench.chaos", "--seed", "4242", "--faults", str(len(KINDS))),
            *("--workdir", str(work), "--source", source),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=850,
        check=False,
    )
    last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    match = re.fullmatch(
        r"faults: (\d+), kinds: (\d+), batches: (\d+), violations: 0, seed: 4242", last
    )
    assert match, last
    assert (int(match[1]), int(match[2])) == (len(KINDS), len(KINDS))
    assert int(match[3]) > len(KINDS)
    # eo's own auditor ran after every fault and audited every decided batch (its violations
    # are in the count above).
    assert _row(result.stdout, "eo audit passes") >= len(KINDS)
    assert _row(result.stdout, "batches they audited") >= int(match[3])
    ran = re.search(r"^eo audit checks that ran in full: (.*)$", result.stdout, re.M)
    assert ran, result.stdout[-3000:]
    assert {"participants", "table-count", "sum-columns"} <= set(ran[1].split(", "))


@pytest.mark.spark
@pytest.mark.slow
def test_a_run_with_the_sinks_in_mariadb_survives_its_restart_and_dropped_sessions(
    tmp_path: Path,
) -> None:
    """``--sink mysql``: the ledger and the latest table in MariaDB, the totals and the
    decisions in PostgreSQL; MariaDB crashed and its sessions killed mid-run, the audit (the
    harness's against the source, and eo's own over MariaDB's markers and branches) clean."""
    kinds = "mysql-restart,mysql-drop-connections,crash-point"
    result = subprocess.run(
        [
            sys.executable,
            *("-m", "bench.chaos", "--seed", "7", "--faults", "3", "--kinds", kinds),
            *("--workdir", str(tmp_path / "chaos"), "--sink", "mysql"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=850,
        check=False,
    )
    last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    match = re.fullmatch(r"faults: 3, kinds: 3, batches: (\d+), violations: 0, seed: 7", last)
    assert match and int(match[1]) > 3, last
    assert "sink mysql" in result.stdout.splitlines()[0]
    assert _row(result.stdout, "rows in the append sink") == _row(
        result.stdout, "records generated (valid)"
    )


def _row(out: str, name: str) -> int:
    """A number from the summary table's row ``name``."""
    found = re.search(rf"^\s*{re.escape(name)}[^\n]*?\s(\d+)$", out, re.M)
    assert found, (name, out[-3000:])
    return int(found[1])


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.cluster
@NEEDS_MOUNTS
def test_a_seeded_operator_mode_run_with_executor_deletion_and_node_partition_has_no_violation(
    tmp_path: Path,
) -> None:
    """The operator mode's kinds that need executor pods and a second node: an executor deleted
    mid-task (Spark retries, the batch commits once) and the driver's node partitioned (the
    operator fences the zombie and relaunches on the other node)."""
    work = tmp_path / "chaos"
    kinds = ("executor-delete", "node-partition")
    result = subprocess.run(
        [
            sys.executable,
            *("-m", "bench.chaos", "--mode", "operator", "--executors", "2"),
            *("--seed", "4242", "--faults", str(len(kinds)), "--kinds", ",".join(kinds)),
            *("--workdir", str(work)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    out = result.stdout.strip()
    last = out.splitlines()[-1] if out else ""
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    match = re.fullmatch(
        r"faults: (\d+), kinds: (\d+), batches: (\d+), violations: 0, seed: 4242", last
    )
    assert match, last
    assert (int(match[1]), int(match[2])) == (len(kinds), len(kinds))
    # Each fault did what it says: an executor went mid-task, the zombie met the fence or was
    # killed when its node came back, after a driver on the other node had decided a batch.
    assert re.search(r"executor-delete: (force-)?deleted-mid-task", out), out[-4000:]
    assert re.search(r"node-partition: zombie-(fenced|killed-at-heal)", out), out[-4000:]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.cluster
def test_operator_mode_spec_edits_and_an_operator_restart_leave_the_pipeline_exact(
    tmp_path: Path,
) -> None:
    """The week-to-week faults: a valid edit restarts the driver under a new epoch, an edit eo
    refuses leaves the running driver on the last good spec (then it is reverted), a graceful
    operator restart restarts no driver; the audit is clean after all three."""
    kinds = ("spec-edit", "spec-edit-invalid", "operator-restart")
    result = subprocess.run(
        [
            sys.executable,
            *("-m", "bench.chaos", "--mode", "operator", "--seed", "5"),
            *("--faults", str(len(kinds)), "--kinds", ",".join(kinds)),
            *("--workdir", str(tmp_path / "chaos")),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    out = result.stdout.strip()
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert re.fullmatch(
        r"faults: 3, kinds: 3, batches: \d+, violations: 0, seed: 5", out.splitlines()[-1]
    ), out[-2000:]
    for outcome in ("spec-edit: restarted", "spec-edit-invalid: kept-running"):
        assert outcome in out, out[-4000:]
    assert "operator-restart: driver-kept" in out, out[-4000:]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.cluster
def test_an_operator_mode_crash_point_kills_one_driver_not_every_relaunched_one(
    tmp_path: Path,
) -> None:
    """Seed 14 picks ``before-prepare``. Left armed until its batch was decided, the fault killed
    every relaunched driver at the same point of the same batch until the harness gave up
    300 s later: one fault, a crash loop (the run of record of seed 50 lost epochs 6, 7 and 8
    to one crash point)."""
    # The harness's first draw from its seeded generator picks the point among POINTS, so a new
    # crash point changes what a seed picks (seed 2 did until after-spark-commit-log came).
    assert random.Random(CRASH_POINT_SEED).choice(POINTS) == "before-prepare", (
        "pick another seed: this one no longer draws before-prepare from POINTS"
    )
    work = tmp_path / "chaos"
    result = subprocess.run(
        [
            sys.executable,
            *("-m", "bench.chaos", "--mode", "operator", "--kinds", "crash-point"),
            *("--seed", str(CRASH_POINT_SEED), "--faults", "1", "--workdir", str(work)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "crash-point: before-prepare" in result.stdout, result.stdout[-4000:]
    # The process kubelets keep one folder per pod they ran: the driver killed once and its
    # replacement at the next epoch, no more (which epochs depends on the launches before the
    # fault: CI once saw e2 and e3).
    drivers = sorted(
        folder.name.split("_")[1]
        for folder in (work / "cluster").glob("pods*/chaos_*-driver-e*_*")
        if "-exec-" not in folder.name
    )
    epochs = sorted(int(name.rsplit("-e", 1)[1]) for name in drivers)
    assert len(epochs) == 2 and epochs[1] == epochs[0] + 1, drivers


@pytest.mark.parametrize(
    "args",
    [
        ["--executors", "2"],  # the driver mode has no executor pods
        ["--mode", "operator", "--kinds", "executor-delete"],  # no executors to delete
        ["--mode", "operator", "--executors", "-1"],
    ],
)
def test_executor_options_the_run_could_not_honour_are_refused_before_anything_starts(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    assert "executor" in capsys.readouterr().err


def test_executors_without_root_are_refused_with_the_reason_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("tests.cluster.podapi.os.geteuid", lambda: 1000)
    with pytest.raises(SystemExit) as exit_info:
        main(["--mode", "operator", "--executors", "2"])
    assert exit_info.value.code == 2
    assert "--executors needs root" in capsys.readouterr().err


def _tables(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE public.ledger (order_id bigint, merchant text, amount_cents bigint)"
        )
        conn.execute(
            "CREATE TABLE public.latest (order_id bigint, merchant text, amount_cents bigint)"
        )
        conn.execute("CREATE TABLE public.ledger_dead_letter (raw text)")
        conn.execute(audit.TOTALS_DDL)
    ControlStore(dsn).ensure_schema()


def test_the_audit_counts_a_duplicate_a_gap_a_wrong_amount_and_a_lost_dead_letter(
    pg_dsn: str, tmp_path: Path
) -> None:
    _tables(pg_dsn)
    stream = Stream(file_emitter(tmp_path / "in"), seed=3, per_file=50, interval=1.0)
    while not stream.truth.malformed:
        stream.write_file()
    truth = stream.truth
    rows = [(oid, merchant, amount) for oid, (merchant, amount) in truth.valid.items()]
    with psycopg.connect(pg_dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO public.ledger VALUES (%s, %s, %s)", rows[1:] + rows[2:3])
        cur.executemany("INSERT INTO public.latest VALUES (%s, %s, %s)", rows)
        conn.execute("UPDATE public.latest SET amount_cents = amount_cents + 1 WHERE order_id = 5")
        # Every merchant's running total right but one, which a replayed batch added to twice.
        totals = [
            (m, sum(r[2] for r in rows if r[1] == m), sum(1 for r in rows if r[1] == m))
            for m in sorted({r[1] for r in rows})
        ]
        totals[0] = (totals[0][0], totals[0][1] + 7, totals[0][2] + 1)
        cur.executemany("INSERT INTO public.merchant_totals VALUES (%s, %s, %s)", totals)

    found = audit.audit(pg_dsn, truth, decided_by_drivers=[0, 1, 1])

    assert found.duplicates == 1 and found.missing == 1
    assert found.sum_mismatches >= 1 and found.latest_wrong == 2
    assert found.totals_wrong == 1
    assert found.dead_letters_missing == len(truth.malformed)
    assert found.batches_decided_twice == 1
    assert set(found.violations()) >= {"duplicates", "missing", "dead_letters_missing"}
