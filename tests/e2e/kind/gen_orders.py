"""Write the order events of the kind end-to-end run into the pipeline's volume, with the truth.

It runs inside the job image as a Kubernetes Job that mounts the PersistentVolumeClaim the
driver pod mounts later, so the driver reads exactly what was written here; hence the
standard library only. Each file is written to a staging folder and then renamed into the
watched folder: Spark's file source must never list a half-written file.

The truth is what an exactly-once sink holds afterwards. It is printed as one line
``EO_E2E_TRUTH {json}`` (run.sh reads it from the Job's log) and kept next to the input for
post-mortems. Besides good orders the stream holds refunds (``amount_cents`` <= 0, which the
pipeline's SQL filters out) and malformed lines (which must land in the dead-letter table),
so the audit also proves that filtered and poison records are neither lost nor duplicated.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

TRUTH_PREFIX = "EO_E2E_TRUTH "
INCOMING = "incoming"
STAGING = ".staging"
REFUND_RATE = 0.03
TRUNCATED_RATE = 0.004
WRONG_TYPE_RATE = 0.004


@dataclass
class Merchant:
    """Rows and amount the sink must hold for one merchant."""

    rows: int = 0
    amount_cents: int = 0


@dataclass
class Truth:
    """What was generated, in the terms the audit compares against the sink."""

    files: int = 0
    lines: int = 0
    valid: int = 0
    filtered: int = 0
    malformed: int = 0
    order_id_sum: int = 0
    merchants: dict[str, Merchant] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        """The truth as plain JSON types (merchants sorted, for stable output)."""
        return {
            "files": self.files,
            "lines": self.lines,
            "valid": self.valid,
            "filtered": self.filtered,
            "malformed": self.malformed,
            "order_id_sum": self.order_id_sum,
            "merchants": {
                name: {"rows": m.rows, "amount_cents": m.amount_cents}
                for name, m in sorted(self.merchants.items())
            },
        }


def _event_lines(rng: random.Random, order_id: int, merchants: int, truth: Truth) -> list[str]:
    """One order event, sometimes followed by a malformed line; updates ``truth``."""
    merchant = f"merchant-{rng.randrange(merchants):02d}"
    amount = rng.randrange(100, 500_000)
    if rng.random() < REFUND_RATE:
        amount = -rng.randrange(0, 50_000)
    event = {
        "order_id": order_id,
        "merchant": merchant,
        "amount_cents": amount,
        "currency": "EUR",
        "event_time": f"2026-11-{1 + order_id % 28:02d}T{order_id % 24:02d}:00:00Z",
    }
    lines = [json.dumps(event)]
    if amount > 0:
        truth.valid += 1
        truth.order_id_sum += order_id
        totals = truth.merchants.setdefault(merchant, Merchant())
        totals.rows += 1
        totals.amount_cents += amount
    else:
        truth.filtered += 1
    if rng.random() < TRUNCATED_RATE:
        lines.append('{"order_id": ' + str(10**9 + order_id) + ', "merchant": "' + merchant)
        truth.malformed += 1
    if rng.random() < WRONG_TYPE_RATE:
        wrong = {**event, "order_id": f"order-{order_id}"}
        lines.append(json.dumps(wrong))
        truth.malformed += 1
    return lines


def generate(root: Path, files: int, events_per_file: int, merchants: int, seed: int) -> Truth:
    """Write ``files`` JSON-lines files into ``root/incoming``; return the truth.

    Refuses a folder that already holds input: the truth would not describe it, and an audit
    against a wrong truth proves nothing.
    """
    incoming = root / INCOMING
    if incoming.exists() and any(incoming.iterdir()):
        raise SystemExit(
            f"{incoming} already holds files: this run's truth would not describe them; "
            "start from an empty volume (delete the PersistentVolumeClaim)"
        )
    staging = root / STAGING
    incoming.mkdir(parents=True, exist_ok=True)
    staging.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    truth = Truth(files=files)
    order_id = 0
    for index in range(files):
        lines: list[str] = []
        for _ in range(events_per_file):
            lines.extend(_event_lines(rng, order_id, merchants, truth))
            order_id += 1
        name = f"orders-{index:04d}.json"
        (staging / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        (staging / name).rename(incoming / name)
        truth.lines += len(lines)
    staging.rmdir()
    return truth


def main(argv: list[str] | None = None) -> int:
    """Generate, keep ``truth.json`` next to the input, print the truth line."""
    parser = argparse.ArgumentParser(description="Write order events and print their truth.")
    parser.add_argument("--root", type=Path, required=True, help="e.g. /data/orders")
    parser.add_argument("--files", type=int, default=80)
    parser.add_argument("--events-per-file", type=int, default=150)
    parser.add_argument("--merchants", type=int, default=12)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    truth = generate(args.root, args.files, args.events_per_file, args.merchants, args.seed)
    document = json.dumps(truth.as_json(), sort_keys=True)
    (args.root / "truth.json").write_text(document + "\n", encoding="utf-8")
    print(
        f"wrote {truth.lines} lines in {truth.files} files: {truth.valid} valid, "
        f"{truth.filtered} refunds (filtered), {truth.malformed} malformed",
        file=sys.stderr,
    )
    print(TRUTH_PREFIX + document, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
