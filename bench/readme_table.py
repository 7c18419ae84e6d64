"""The README's speed tables, generated from ``bench.compare --json``'s output.

``python -m bench.readme_table results.json`` prints Markdown to paste into README.md's
"Speed" section: rows/s of every variant at every batch size with the ratios issue 13 names,
then the protocol's own figures. Generated, so the README cannot quote a figure the JSON does
not hold.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.compare import MYSQL_RATIO, RATIO_LABELS, RATIOS, markdown

LABELS = {
    "exactly-once": "eo exactly-once",
    "at-least-once": "eo at-least-once",
    "idempotent": "eo idempotent (upsert)",
    "spark-jdbc": "Spark JDBC",
    "spark-noop": "Spark -> noop",
    "copy": "COPY, no Spark",
    "exactly-once-mysql": "eo exactly-once (mysql)",
    "spark-jdbc-mysql": "Spark JDBC (mysql)",
}


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if value >= 0.1 else f"{value:.3f}"


def _size_label(size: dict[str, Any]) -> str:
    """``200,000 (8)``; a longer warm-up than the first batch is named (JSON before it: 1)."""
    warmup = size.get("warmup_batches", 1)
    extra = f", the first {warmup} left out as warm-up" if warmup > 1 else ""
    return f"{size['rows_per_batch']:,} ({size['batches']}{extra})"


def render(doc: dict[str, Any]) -> str:
    """Markdown: throughput by size and variant with the ratios, then the protocol figures."""
    sizes = [s for s in doc["sizes"] if s["variants"]]
    names = [n for n in LABELS if any(n == v["variant"] for s in sizes for v in s["variants"])]
    ratio_keys = [key for key, _ in RATIOS]
    if any(s["ratios"].get(MYSQL_RATIO) is not None for s in sizes):  # issue 29's variants ran
        ratio_keys.append(MYSQL_RATIO)
    headers = ["rows per batch (batches)", *[f"{LABELS[n]} rows/s" for n in names]]
    headers += [RATIO_LABELS[key] for key in ratio_keys]
    rows = []
    for size in sizes:
        rate = {v["variant"]: v["rows_per_s"] for v in size["variants"]}
        rows.append(
            [
                _size_label(size),
                *[_rate(rate.get(n)) for n in names],
                *[_ratio(size["ratios"].get(key)) for key in ratio_keys],
            ]
        )
    parts = [markdown(headers, rows)]
    phase2 = doc["protocol"]["phase2"]
    facts: list[list[str]] = []
    for sinks in sorted({p["sinks"] for p in phase2}):
        shapes = sorted((p for p in phase2 if p["sinks"] == sinks), key=lambda p: p["partitions"])
        facts.append(
            [
                f"decide+commit per batch (p50), {sinks} sink(s), "
                + " / ".join(str(p["partitions"]) for p in shapes)
                + " writer partitions",
                " / ".join(f"{p['decide_commit_ms_p50']:.0f}" for p in shapes) + " ms",
            ]
        )
    in_doubt = doc["protocol"]["in_doubt"]
    if in_doubt:
        facts.append(
            [
                f"{in_doubt['transactions']:,} in-doubt transactions resolved "
                f"({in_doubt['committed']} committed, {in_doubt['rolled_back']} rolled back)",
                f"{in_doubt['seconds']:.2f} s",
            ]
        )
    recovery = doc["recovery"]
    if recovery:
        facts += [
            ["SIGKILL -> first new decided batch", f"{recovery['kill_to_first_batch_s']:.1f} s"],
            [
                "  of which Spark start-up (kill -> recovery starts)",
                f"{recovery['spark_startup_s']:.1f} s",
            ],
            [
                f"  of which fence + resolve ({recovery['committed']} committed, "
                f"{recovery['rolled_back']} rolled back)",
                f"{recovery['fence_resolve_s']:.3f} s",
            ],
            ["  of which query start + first batch", f"{recovery['first_batch_s']:.1f} s"],
        ]
    if facts:
        parts.append(markdown(["protocol, no Spark unless said", "measured"], facts))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Print the tables of one JSON result file."""
    parser = argparse.ArgumentParser(prog="python -m bench.readme_table", description=__doc__)
    parser.add_argument("results", type=Path, help="the file bench.compare --json wrote")
    args = parser.parse_args(argv)
    print(render(json.loads(args.results.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
