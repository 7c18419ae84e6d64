"""The bench runs every variant on one tiny data set and reports each one with its audit.

A smoke test of the measuring machinery, not of speed: no figure is compared with a threshold.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import compare, variants

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _printed_table(out: str) -> dict[str, dict[str, str]]:
    """The Markdown table on stdout, as {variant: {header: cell}}."""
    lines = [line for line in out.splitlines() if line.startswith("| ")]
    headers = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = [
        dict(zip(headers, (c.strip() for c in line.strip("|").split("|")), strict=True))
        for line in lines[1:]
    ]
    return {row["variant"]: row for row in rows}


def test_the_bench_reports_all_four_variants_and_exactly_once_ones_are_exact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "bench.json"
    code = compare.main(["--events", "2000", "--files", "2", "--json", str(report)])
    out = capsys.readouterr().out
    assert code == 0, out

    printed = _printed_table(out)
    assert sorted(printed) == sorted(v.name for v in variants.VARIANTS), out
    for name in (v.name for v in variants.VARIANTS if v.two_phase):
        assert (printed[name]["duplicates"], printed[name]["missing"]) == ("0", "0"), out

    results = json.loads(report.read_text())
    for name, runs in results["runs"].items():
        (run,) = runs
        assert run["code"] == 0, name
        assert run["batch_seconds"], f"{name}: no batch timing was captured"
        assert run["audit"]["rows"] == 2000, (name, run["audit"])
        assert run["audit"]["wrong"] == 0, (name, run["audit"])
    assert "pyspark" in results["environment"] and "postgresql" in results["environment"]
