"""The bench's steady rate leaves a size's warm-up batches out, and only those.

eo's cycle at 200,000 rows per batch keeps shortening for some 40 batches while the JIT compiles
Spark's planner and the write path, and the JDBC job's flattens after ~5 (bench/README.md): a
run that should say what a long-running pipeline sustains names its warm-up
(``ROWSxBATCHES:WARMUP``), the same for every variant. These checks need no Spark.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench import compare, readme_table, runner


def _run(ends: list[float]) -> runner.Run:
    batches = tuple(runner.Batch(batch_id=i, seconds=0.5, ended=end) for i, end in enumerate(ends))
    return runner.Run(code=0, wall=ends[-1], batches=batches, log=Path("driver.log"))


def test_a_size_names_its_warm_up_batches_and_medium_measures_its_steady_state() -> None:
    sizes = compare._sizes("small,medium,large,200000x60:30,2000x3", 10_000)

    assert [(s.name, s.batches, s.warmup) for s in sizes] == [
        ("small", 10, 1),
        ("medium", 60, 30),
        ("large", 10, 2),
        ("200000x60:30", 60, 30),
        ("2000x3", 3, 1),
    ]


@pytest.mark.parametrize("size", ["2000x3:0", "2000x3:3", "2000x3:x"])
def test_a_warm_up_that_leaves_no_batch_to_measure_is_refused(size: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="WARMUP"):
        compare._sizes(size, 1000)


def test_the_steady_time_runs_from_the_end_of_the_last_warm_up_batch() -> None:
    run = _run([10.0, 11.0, 11.5, 12.5, 13.0])

    assert run.steady_after(1) == pytest.approx(3.0)
    assert run.steady_after(3) == pytest.approx(1.5)
    assert run.steady_after(5) == 0.0


def test_the_steady_rate_counts_only_the_batches_after_the_warm_up() -> None:
    (size,) = compare._sizes("1000x5:3", 1000)
    run = _run([10.0, 11.0, 11.5, 12.5, 13.0])
    measured = compare.Measured(
        variant="at-least-once",
        size=size.name,
        code=0,
        wall=13.0,
        streaming=3.5,
        steady=run.steady_after(size.warmup),
        batch_seconds=tuple(b.seconds for b in run.batches),
        protocol_ms=(),
        audit=None,
        load=0.0,
        log="driver.log",
    )

    row = compare.summarize(size, "at-least-once", [measured])

    # Batches 4 and 5 (2,000 rows) in the 1.5 s after batch 3 ended.
    assert row["rows_per_s"] == pytest.approx(2000 / 1.5)
    assert row["warmup_batches"] == 3


def test_the_readme_table_names_a_warm_up_longer_than_the_first_batch() -> None:
    size = {"rows_per_batch": 200_000, "batches": 60, "warmup_batches": 30}

    assert readme_table._size_label(size) == "200,000 (60, the first 30 left out as warm-up)"
    assert readme_table._size_label({**size, "warmup_batches": 1}) == "200,000 (60)"
    assert readme_table._size_label({"rows_per_batch": 20_000, "batches": 10}) == "20,000 (10)"
