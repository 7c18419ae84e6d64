"""A phase 2 that fails while the stream is idle is retried and logged at once; past its bound
the driver exits so that recovery commits the batch (a real driver, processing-time trigger)."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from tests.runtime import harness

pytestmark = pytest.mark.spark

FAULT = {"point": "after-spark-commit-log", "batch": "0", "action": "raise"}


def _orders(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM public.orders").fetchone()
    return int(row[0]) if row else -1


def _phase_two_failures(out: str) -> list[dict[str, object]]:
    """The JSON log records of failed phase-2 attempts."""
    records = [json.loads(line) for line in out.splitlines() if line.startswith('{"level"')]
    return [r for r in records if r.get("logger") == "eo.phase2" and "attempt" in r]


def _wait_for(
    what: str, check: Callable[[], object], driver: harness.Driver, seconds: float
) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert driver.proc.poll() is None, (
            f"driver exited while waiting for {what}: {driver.output()}"
        )
        assert time.monotonic() < deadline, f"no {what} within {seconds}s: {driver.output()}"
        time.sleep(0.2)


def test_a_transient_phase_2_failure_on_an_idle_stream_is_retried_and_the_rows_appear(
    tmp_path: Path, pg_dsn: str
) -> None:
    """The fault raises at every attempt while its file exists (a sink down); once it is gone
    the next retry commits the batch, with no new input and the driver still running."""
    harness.create_table(pg_dsn)
    truth = harness.write_files(tmp_path / "in", files=1, per_file=50, malformed_every=999)
    spec = harness.files_pipeline(tmp_path)
    fault_file = tmp_path / "fault.json"
    fault_file.write_text(json.dumps(FAULT))
    driver = harness.Driver(
        spec,
        1,
        pg_dsn,
        available_now=False,
        extra_env={"EO_FAULT_FILE": str(fault_file), "EO_PHASE_TWO_RETRY_SECONDS": "600"},
    )
    try:
        _wait_for(
            "logged phase-2 failure", lambda: _phase_two_failures(driver.output()), driver, 180
        )
        [first, *_] = _phase_two_failures(driver.output())
        assert first["level"] == "WARNING" and first["batch"] == 0, first
        assert "InjectedFaultError" in str(first["message"]), first
        assert _orders(pg_dsn) == 0  # decided, still prepared
        fault_file.unlink()
        _wait_for("rows", lambda: _orders(pg_dsn) == 50, driver, 60)
        driver.kill(signal.SIGTERM)
        assert driver.wait(120) == 0, driver.output()
    finally:
        driver.kill()
    harness.assert_exact(pg_dsn, truth)


def test_a_persistent_phase_2_failure_on_an_idle_stream_exits_the_driver_within_its_bound(
    tmp_path: Path, pg_dsn: str
) -> None:
    """Every attempt fails: past ``EO_PHASE_TWO_RETRY_SECONDS`` the query is stopped and the
    driver exits 1, and the next driver's recovery commits the batch by its decision."""
    harness.create_table(pg_dsn)
    truth = harness.write_files(tmp_path / "in", files=1, per_file=50, malformed_every=999)
    spec = harness.files_pipeline(tmp_path)
    fault = {f"EO_FAULT_{k.upper()}": v for k, v in FAULT.items()}
    driver = harness.Driver(
        spec, 1, pg_dsn, available_now=False, extra_env={**fault, "EO_PHASE_TWO_RETRY_SECONDS": "4"}
    )
    try:
        code = driver.wait(150)
    finally:
        driver.kill()
    out = driver.output()
    assert code == 1, out
    failures = _phase_two_failures(out)
    assert len(failures) >= 2, out  # retried, each failure logged
    assert "phase 2 of batch 0 failed after its decision was recorded" in out, out
    code, out = harness.run(spec, 2, pg_dsn)
    assert code == 0, out
    harness.assert_exact(pg_dsn, truth)
