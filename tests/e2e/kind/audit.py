"""The exactly-once audit of the kind end-to-end run: sink and status against the truth.

run.sh pipes ``SINK_SQL`` (``audit.py sql``) into psql inside the PostgreSQL pod, so the audit
reads the database the drivers wrote through the server's own client, and then runs
``audit.py compare`` with that JSON, the generator's truth and the pipeline object
(``kubectl get eop -o json``). It prints one table and exits 1 when any check fails.
Standard library only: it runs on the CI host's Python, outside the project's virtualenv.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SINK_SQL = """\
SELECT json_build_object(
  'rows', (SELECT count(*) FROM public.ledger),
  'distinct_orders', (SELECT count(DISTINCT order_id) FROM public.ledger),
  'order_id_sum', (SELECT coalesce(sum(order_id), 0) FROM public.ledger),
  'non_positive', (SELECT count(*) FROM public.ledger WHERE amount_cents <= 0),
  'merchants', (
    SELECT coalesce(json_object_agg(merchant,
                                    json_build_object('rows', n, 'amount_cents', total)),
                    '{}'::json)
    FROM (SELECT merchant, count(*) AS n, sum(amount_cents) AS total
          FROM public.ledger GROUP BY merchant) AS per_merchant),
  'dead_letters', (SELECT count(*) FROM public.ledger_dead_letter),
  'prepared', (SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database())
)::text;
"""
"""One row, one JSON value: everything the audit needs from the sink database."""

Json = Mapping[str, Any]


@dataclass(frozen=True)
class Check:
    """One line of the audit table."""

    name: str
    expected: str
    actual: str
    ok: bool


def _equal(name: str, expected: object, actual: object) -> Check:
    return Check(name, _show(expected), _show(actual), expected == actual)


def _at_least(name: str, minimum: int, actual: object) -> Check:
    ok = isinstance(actual, int) and actual >= minimum
    return Check(name, f">= {minimum}", _show(actual), ok)


def _show(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def merchant_mismatches(truth: Json, sink: Json) -> list[str]:
    """Merchants whose row count or amount differs, as readable lines (empty: all match)."""
    expected: Json = truth["merchants"]
    actual: Json = sink["merchants"]
    lines = []
    for name in sorted(set(expected) | set(actual)):
        want = expected.get(name, {"rows": 0, "amount_cents": 0})
        got = actual.get(name, {"rows": 0, "amount_cents": 0})
        if (want["rows"], want["amount_cents"]) != (got["rows"], got["amount_cents"]):
            lines.append(
                f"{name}: expected {want['rows']} rows / {want['amount_cents']} cents, "
                f"sink has {got['rows']} rows / {got['amount_cents']} cents"
            )
    return lines


def checks(
    truth: Json, sink: Json, pipeline: Json, first_epoch: int, disruptions: int
) -> list[Check]:
    """Every check of the run, in table order."""
    status: Json = pipeline.get("status") or {}
    merchants = len(set(truth["merchants"]) | set(sink["merchants"]))
    matching = merchants - len(merchant_mismatches(truth, sink))
    return [
        _equal("rows in public.ledger", truth["valid"], sink["rows"]),
        _equal("distinct order_id", truth["valid"], sink["distinct_orders"]),
        _equal("sum of order_id", truth["order_id_sum"], sink["order_id_sum"]),
        _equal("merchants with exact rows and sums", merchants, matching),
        _equal("refunds in the sink (filtered by SQL)", 0, sink["non_positive"]),
        _equal("dead letters (malformed lines)", truth["malformed"], sink["dead_letters"]),
        _equal("prepared transactions left", 0, sink["prepared"]),
        _equal("status.phase", "Running", status.get("phase")),
        _at_least("status.epoch", first_epoch + disruptions, status.get("epoch")),
        # A graceful delete is a stop, not a failure; the forced one (pod gone while running)
        # counts as a restart.
        _at_least("status.restarts", 1, status.get("restarts")),
        _equal("status.inDoubtTransactions", 0, status.get("inDoubtTransactions")),
    ]


def render(rows: list[Check], notes: list[str]) -> str:
    """The audit as a fixed-width table, then the notes, then the one-line verdict."""
    width = max(len(row.name) for row in rows)
    left = max(len("expected"), *(len(row.expected) for row in rows))
    right = max(len("actual"), *(len(row.actual) for row in rows))
    out = [
        f"{'exactly-once audit (kind)':<{width}}  {'expected':>{left}}  {'actual':>{right}}",
        f"{'-' * width}  {'-' * left}  {'-' * right}  ----",
    ]
    for row in rows:
        mark = "ok" if row.ok else "FAIL"
        out.append(f"{row.name:<{width}}  {row.expected:>{left}}  {row.actual:>{right}}  {mark}")
    out.extend(notes)
    ok = all(row.ok for row in rows)
    out.append("RESULT: exactly once" if ok else "RESULT: MISMATCH (see the FAIL rows above)")
    return "\n".join(out)


def _load(path: Path) -> Json:
    document = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(document, dict):
        raise SystemExit(f"{path}: expected a JSON object, got {type(document).__name__}")
    return document


def compare(args: argparse.Namespace) -> int:
    """``audit.py compare``: print the table; 0 when every check passes, else 1."""
    truth, sink, pipeline = _load(args.truth), _load(args.sink), _load(args.pipeline)
    rows = checks(truth, sink, pipeline, args.first_epoch, args.disruptions)
    status: Json = pipeline.get("status") or {}
    notes = [f"merchant mismatch: {line}" for line in merchant_mismatches(truth, sink)]
    notes.append(
        f"input: {truth['files']} files, {truth['lines']} lines ({truth['filtered']} refunds); "
        f"last decided batch {status.get('lastBatchId')}, epochs {args.first_epoch} -> "
        f"{status.get('epoch')}"
    )
    print(render(rows, notes))
    return 0 if all(row.ok for row in rows) else 1


def main(argv: list[str] | None = None) -> int:
    """``audit.py sql`` prints the query; ``audit.py compare ...`` judges its result."""
    parser = argparse.ArgumentParser(description="Exactly-once audit of the kind e2e run.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("sql", help="print the query to run with psql -At in the sink database")
    p = sub.add_parser("compare", help="compare the sink and the status with the truth")
    p.add_argument("--truth", type=Path, required=True, help="the generator's truth JSON")
    p.add_argument("--sink", type=Path, required=True, help="the output of the sql query")
    p.add_argument("--pipeline", type=Path, required=True, help="kubectl get eop -o json")
    p.add_argument("--first-epoch", type=int, required=True, help="epoch before disruptions")
    p.add_argument("--disruptions", type=int, required=True, help="driver pods deleted")
    args = parser.parse_args(argv)
    if args.command == "sql":
        sys.stdout.write(SINK_SQL)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
