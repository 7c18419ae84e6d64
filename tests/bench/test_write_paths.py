"""The write-path candidates run on the same data, and each writing one is audited.

A smoke test of the machinery (tiny input, one timed run, its own Spark in a child process):
every candidate prints a row, and the table each writing candidate filled holds every order
exactly once (else exit 1).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_every_candidate_is_timed_and_every_writing_one_lands_each_row_once() -> None:
    args = ["--rows", "20000", "--repeat", "1", "--cores", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.write_paths", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    rows = [line.split("|")[1].strip() for line in lines if line.startswith("| ")]
    assert rows == ["candidate", "noop", "arrow", "csv", "binary", "eo"]
    assert "LOST OR REPEATED" not in done.stderr
