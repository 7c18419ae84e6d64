"""The latency bench on a tiny input: every event seen exactly once, latencies read from
PostgreSQL's commit timestamps and ordered, the JSON's field names. Never a timing threshold."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import latency, runner

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]


def test_a_tiny_exactly_once_run_sees_every_event_once_and_orders_its_percentiles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "latency.json"
    code = latency.main(
        [
            "--rates",
            "200",
            "--seconds",
            "3",
            "--warmup",
            "2",
            "--variants",
            "exactly-once",
            "--json",
            str(report),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out

    doc = json.loads(report.read_text())
    assert doc["schema"] == "eo-latency/1"
    (run,) = doc["runs"]
    assert (run["variant"], run["rate"], run["measured"]) == ("exactly-once", 200, 600)
    # The warm-up: 2 s of events, then 5 s more at a time until the driver caught up.
    assert run["caught_up"] and (run["events"] - 600 - 400) % 1_000 == 0
    assert run["warmup_s"] >= 2
    assert (run["duplicates"], run["missing"], run["exact"]) == (0, 0, True)
    assert 0 < run["p50_ms"] <= run["p95_ms"] <= run["p99_ms"] <= run["max_ms"]
    assert run["batches"] >= 1 and run["trigger_seconds"] == 1
    assert "| exactly-once  |" in out or "| exactly-once |" in out
    # Where the measured window's batches spent their time: Spark's phases and eo's.
    parts = run["parts_ms"]
    assert {"addBatch", "latestOffset", "triggerExecution", "prepare_ms", "decide_ms"} <= set(parts)
    assert 0 < parts["prepare_ms"] <= parts["addBatch"] <= parts["triggerExecution"]
    assert "where a batch's time goes" in out
    assert run["cpu_percent"] > 0


def test_the_driver_s_cpu_is_its_process_group_s_only() -> None:
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    child = subprocess.Popen([sys.executable, "-c", busy], start_new_session=True)
    child.wait()
    # Counted only while alive: a group whose processes ended has no CPU left to count.
    assert latency.cpu_seconds(child.pid) == 0.0
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True
    )
    spinner = subprocess.Popen(
        [sys.executable, "-c", busy + "\nimport time; time.sleep(30)"], start_new_session=True
    )
    try:
        deadline = time.monotonic() + 30
        while latency.cpu_seconds(spinner.pid) < 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert latency.cpu_seconds(spinner.pid) >= 0.3
        assert latency.cpu_seconds(sleeper.pid) < 0.3
    finally:
        for process in (sleeper, spinner):
            process.kill()
            process.wait()


def test_a_batch_s_parts_come_from_the_measured_window_and_skip_empty_triggers() -> None:
    def event(at: float, **record: object) -> runner.Event:
        return runner.Event(at, dict(record))

    events = [
        event(1.0, event="progress", input_rows=5, duration_ms={"addBatch": 900}),
        event(2.0, event="progress", input_rows=0, duration_ms={"addBatch": 1}),
        event(3.0, event="progress", input_rows=5, duration_ms={"addBatch": 300}),
        event(4.0, event="progress", input_rows=5, duration_ms={"addBatch": 100}),
        event(4.0, event="batch", prepare_ms=80.0, decide_ms=3.0, commit_ms=4.0),
    ]
    parts = latency.batch_parts(events, since=2.0)
    assert parts == {"addBatch": 100.0, "prepare_ms": 80.0, "decide_ms": 3.0, "commit_ms": 4.0}


def test_the_targets_compare_exactly_once_with_at_least_once_at_the_same_rate() -> None:
    def run(variant: str, rate: int, p99: float) -> latency.Latency:
        return latency.Latency(
            variant, rate, float(rate), 1, 100, 100, p99, p99, p99, p99, 1, 0.5, 0, 0, 0, ""
        )

    found = latency.targets(
        [run("exactly-once", 500, 1_900.0), run("at-least-once", 500, 1_500.0)], max_rate=1_000
    )

    assert [(t["target"], t["met"]) for t in found] == [
        ("EO p99 <= 1.2x ALO p99 at 500/s", False),
        ("EO p99 <= trigger + 1 s at half the maximum (500/s), ms", True),
    ]


def test_a_run_that_keeps_up_has_a_flat_latency_and_one_that_falls_behind_a_rising_one() -> None:
    flat = [900.0, 1_400.0, 700.0, 1_100.0] * 250
    rising = [800.0 + 3.0 * i for i in range(1_000)]  # a backlog adds 3 s over the window

    assert latency.kept_up(flat, 1_000, 1_000.0)[0]
    ok, first, last = latency.kept_up(rising, 1_000, 1_000.0)
    assert not ok and last - first > latency.GROWTH_MS
    # A rate the producer could not even send is not one the machine sustains.
    assert not latency.kept_up(flat, 1_000, 900.0)[0]


def _pipeline_of_capacity(capacity: int) -> tuple[list[int], object]:
    asked: list[int] = []

    def measure_rate(rate: int) -> tuple[latency.Latency, list[float]]:
        asked.append(rate)
        behind = max(0.0, rate / capacity - 1.0)
        latencies = [1_000.0 + behind * 30_000.0 * i / 400 for i in range(400)]
        run = latency.Latency(
            "exactly-once",
            rate,
            float(rate),
            1,
            400,
            400,
            1.0,
            1.0,
            latencies[-1],
            1.0,
            10,
            0.5,
            0,
            0,
            0,
            "",
        )
        return run, latencies

    return asked, measure_rate


def test_the_search_for_the_maximum_brackets_the_capacity_within_its_precision() -> None:
    asked, measure_rate = _pipeline_of_capacity(23_000)

    found, probes = latency.find_max(measure_rate, 5_000, 80_000, 0.1)  # type: ignore[arg-type]

    # Within the precision below, and at most the criterion's ~5 % above (GROWTH_MS).
    assert found is not None and 23_000 / 1.1 <= found <= 23_000 * 1.05
    assert asked[0] == 5_000 and [p.rate for p in probes] == asked
    assert all(p.kept_up for p in probes if p.rate <= 23_000)
    assert not any(p.kept_up for p in probes if p.rate > 23_000 * 1.05)
    assert all(p.exact for p in probes)


def test_the_search_says_so_when_even_its_lowest_rate_falls_behind() -> None:
    asked, measure_rate = _pipeline_of_capacity(1_000)

    found, probes = latency.find_max(measure_rate, 5_000, 80_000, 0.1)  # type: ignore[arg-type]

    assert found is None and asked == [5_000] and not probes[0].kept_up


def test_find_max_runs_at_half_and_seventy_percent_and_refuses_a_given_maximum() -> None:
    args = latency._parse(["--find-max", "5000:80000"])
    assert args.find_max == (5_000, 80_000) and args.rates == []
    with pytest.raises(SystemExit):
        latency._parse(["--find-max", "5000:80000", "--max-rate", "60000"])
    with pytest.raises(SystemExit):
        latency._parse(["--find-max", "80000:5000"])


def test_the_driver_has_caught_up_after_three_batches_of_steady_size() -> None:
    def batches(*rows: int) -> list[runner.Event]:
        return [runner.Event(float(i), {"event": "batch", "rows": r}) for i, r in enumerate(rows)]

    # At 1,000/s and a 1 s trigger a batch of at most 2,000 events is a steady one.
    assert not latency.caught_up(batches(500, 9_000, 4_000), 1_000, 1)
    assert not latency.caught_up(batches(9_000, 1_000, 1_200), 1_000, 1)
    assert latency.caught_up(batches(9_000, 4_000, 1_000, 1_200, 2_000), 1_000, 1)
    # With trigger 0 (batches back to back) the bound is a second's events, doubled.
    assert latency.caught_up(batches(300, 400, 350), 1_000, 0)
    assert not latency.caught_up([runner.Event(0.0, {"event": "progress", "rows": 1})], 1, 1)
