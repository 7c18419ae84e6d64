"""docs/metrics.md documents every metric the operator and the driver export, and no other."""

from __future__ import annotations

import re
from pathlib import Path

from tests.monitoring.metric_names import defined_series_names

METRICS_DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")


def _documented_name(series: str) -> str:
    """Histograms are documented once, without their _bucket/_sum/_count series suffix."""
    for part in HISTOGRAM_PARTS:
        if series.endswith(part):
            return series.removesuffix(part)
    return series


def test_every_exported_metric_has_a_row_in_docs_metrics_md_and_vice_versa() -> None:
    documented = set(re.findall(r"^\| `(eo_[a-z0-9_]+)` \|", METRICS_DOC.read_text(), re.M))
    exported = {_documented_name(series) for series in defined_series_names()}
    assert sorted(documented - exported) == [], "documented but not exported"
    assert sorted(exported - documented) == [], "exported but not documented"
