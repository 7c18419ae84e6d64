"""The kind run's generator and audit, checked here without Docker.

The kind suite can only pass honestly if its truth describes the input and its audit catches
every way the sink can be wrong. Both are checked on this machine: the generator against an
independent re-reading of its files, and the audit's SQL through ``psql`` (as run.sh runs it
in the PostgreSQL pod) against a real PostgreSQL holding the ledger table of
``manifests/postgres.yaml``, loaded correctly and then spoiled in each way it must detect.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, LiteralString

import psycopg
import pytest
import yaml

from eo_jobs.pgserver import find_bindir
from tests.e2e.kind import audit, gen_orders

HERE = Path(__file__).resolve().parent
DEAD_LETTER_DDL = (
    "CREATE TABLE public.ledger_dead_letter (pipeline text NOT NULL, batch_id bigint NOT NULL, "
    "raw text, reason text NOT NULL, recorded_at timestamptz NOT NULL DEFAULT now())"
)
FIRST_EPOCH = 1
DISRUPTIONS = 2


def ledger_ddl() -> str:
    """The ledger table exactly as the in-cluster PostgreSQL creates it on first start."""
    for doc in yaml.safe_load_all((HERE / "manifests" / "postgres.yaml").read_text()):
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "postgres-init":
            return str(doc["data"]["01-ledger.sql"])
    raise AssertionError("manifests/postgres.yaml has no ConfigMap postgres-init")


def healthy_pipeline() -> dict[str, Any]:
    """A pipeline object as the operator should leave it after two driver deletions."""
    return {
        "status": {
            "phase": "Running",
            "epoch": FIRST_EPOCH + DISRUPTIONS,
            "restarts": DISRUPTIONS,
            "inDoubtTransactions": 0,
            "lastBatchId": 39,
        }
    }


@dataclass
class Reread:
    """The input as an independent reader classifies it."""

    valid: list[tuple[int, str, int, str, str]]
    filtered: int
    malformed: list[str]


def reread(incoming: Path) -> Reread:
    """Classify every line the way the pipeline must: parse, type-check, filter refunds."""
    out = Reread([], 0, [])
    for path in sorted(incoming.iterdir()):
        for line in path.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                out.malformed.append(line)
                continue
            if not isinstance(event["order_id"], int):
                out.malformed.append(line)
            elif event["amount_cents"] > 0:
                out.valid.append(
                    (
                        event["order_id"],
                        event["merchant"],
                        event["amount_cents"],
                        event["currency"],
                        event["event_time"],
                    )
                )
            else:
                out.filtered += 1
    return out


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A small input written by the generator, with the truth it printed."""
    root = tmp_path_factory.mktemp("orders")
    truth = gen_orders.generate(root, files=12, events_per_file=120, merchants=7, seed=11)
    return root / gen_orders.INCOMING, truth.as_json()


def test_the_generator_truth_describes_the_files_it_wrote(
    generated: tuple[Path, dict[str, Any]],
) -> None:
    incoming, truth = generated
    seen = reread(incoming)
    merchants: dict[str, dict[str, int]] = {}
    for _, merchant, amount, _, _ in seen.valid:
        totals = merchants.setdefault(merchant, {"rows": 0, "amount_cents": 0})
        totals["rows"] += 1
        totals["amount_cents"] += amount
    assert len(list(incoming.iterdir())) == truth["files"] == 12
    assert truth["valid"] == len(seen.valid) == len({row[0] for row in seen.valid})
    assert truth["order_id_sum"] == sum(row[0] for row in seen.valid)
    assert truth["filtered"] == seen.filtered > 0
    assert truth["malformed"] == len(seen.malformed) > 0
    assert truth["merchants"] == merchants
    assert truth["lines"] == len(seen.valid) + seen.filtered + len(seen.malformed)


def test_the_generator_refuses_a_volume_that_already_holds_input(tmp_path: Path) -> None:
    gen_orders.generate(tmp_path, files=1, events_per_file=5, merchants=2, seed=1)
    with pytest.raises(SystemExit, match="already holds files"):
        gen_orders.generate(tmp_path, files=1, events_per_file=5, merchants=2, seed=1)


def test_the_generator_prints_the_truth_as_one_line_for_run_sh(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gen_orders.main(["--root", str(tmp_path), "--files", "2", "--events-per-file", "9"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("EO_E2E_TRUTH ")]
    assert len(lines) == 1
    printed = json.loads(lines[0].removeprefix("EO_E2E_TRUTH "))
    assert printed == json.loads((tmp_path / "truth.json").read_text())
    assert printed["lines"] >= 18


@pytest.fixture
def ledger(pg_dsn: str, generated: tuple[Path, dict[str, Any]]) -> Iterator[str]:
    """A database whose sink holds exactly what an exactly-once pipeline must leave."""
    seen = reread(generated[0])
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(ledger_ddl())
        conn.execute(DEAD_LETTER_DDL)
        with conn.cursor().copy(
            "COPY public.ledger (order_id, merchant, amount_cents, currency, event_time) FROM STDIN"
        ) as copy:
            for row in seen.valid:
                copy.write_row(row)
        with conn.cursor().copy(
            "COPY public.ledger_dead_letter (pipeline, batch_id, raw, reason) FROM STDIN"
        ) as copy:
            for raw in seen.malformed:
                copy.write_row(("eo-e2e/orders-ledger", 0, raw, "does not parse"))
    yield pg_dsn


def sink_json(dsn: str) -> dict[str, Any]:
    """The audit's query through psql -At, exactly as run.sh runs it in the PostgreSQL pod."""
    result = subprocess.run(
        [str(find_bindir() / "psql"), "-X", "-At", "-v", "ON_ERROR_STOP=1", dsn],
        input=audit.SINK_SQL,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    document = json.loads(result.stdout)
    assert isinstance(document, dict)
    return document


def failing(truth: dict[str, Any], sink: dict[str, Any], pipeline: dict[str, Any]) -> set[str]:
    """Names of the checks that fail."""
    rows = audit.checks(truth, sink, pipeline, FIRST_EPOCH, DISRUPTIONS)
    return {row.name for row in rows if not row.ok}


def test_the_audit_passes_a_sink_holding_every_valid_order_once(
    ledger: str, generated: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    truth = generated[1]
    files = {
        "truth": truth,
        "sink": sink_json(ledger),
        "pipeline": healthy_pipeline(),
    }
    for name, document in files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(document))
    code = audit.main(
        [
            "compare",
            *("--truth", str(tmp_path / "truth.json")),
            *("--sink", str(tmp_path / "sink.json")),
            *("--pipeline", str(tmp_path / "pipeline.json")),
            *("--first-epoch", str(FIRST_EPOCH)),
            *("--disruptions", str(DISRUPTIONS)),
        ]
    )
    assert code == 0
    assert failing(truth, files["sink"], files["pipeline"]) == set()


SPOILED: dict[str, tuple[LiteralString, set[str]]] = {
    "a duplicated order": (
        "INSERT INTO public.ledger SELECT * FROM public.ledger ORDER BY order_id DESC LIMIT 1",
        {"rows in public.ledger", "sum of order_id", "merchants with exact rows and sums"},
    ),
    "a lost order": (
        "DELETE FROM public.ledger WHERE order_id = (SELECT max(order_id) FROM public.ledger)",
        {
            "rows in public.ledger",
            "distinct order_id",
            "sum of order_id",
            "merchants with exact rows and sums",
        },
    ),
    "an order swapped for another id": (
        "UPDATE public.ledger SET order_id = order_id + 1000000 "
        "WHERE order_id = (SELECT min(order_id) FROM public.ledger)",
        {"sum of order_id"},
    ),
    "an amount changed": (
        "UPDATE public.ledger SET amount_cents = amount_cents + 1 "
        "WHERE order_id = (SELECT min(order_id) FROM public.ledger)",
        {"merchants with exact rows and sums"},
    ),
    "a refund that passed the filter": (
        "INSERT INTO public.ledger VALUES (-1, 'merchant-00', -5, 'EUR', now())",
        {
            "rows in public.ledger",
            "distinct order_id",
            "sum of order_id",
            "merchants with exact rows and sums",
            "refunds in the sink (filtered by SQL)",
        },
    ),
    "a duplicated dead letter": (
        "INSERT INTO public.ledger_dead_letter SELECT * FROM public.ledger_dead_letter LIMIT 1",
        {"dead letters (malformed lines)"},
    ),
}


@pytest.mark.parametrize("spoil", sorted(SPOILED))
def test_the_audit_fails_a_sink_with(
    ledger: str, generated: tuple[Path, dict[str, Any]], spoil: str
) -> None:
    statement, expected = SPOILED[spoil]
    with psycopg.connect(ledger, autocommit=True) as conn:
        conn.execute(statement)
    assert failing(generated[1], sink_json(ledger), healthy_pipeline()) == expected


def test_the_audit_fails_a_sink_with_a_prepared_transaction_left(
    ledger: str, generated: tuple[Path, dict[str, Any]]
) -> None:
    with psycopg.connect(ledger, autocommit=True) as conn:
        conn.execute("BEGIN")
        conn.execute(
            "INSERT INTO public.ledger_dead_letter (pipeline, batch_id, reason) "
            "VALUES ('x', 0, 'in doubt')"
        )
        conn.execute("PREPARE TRANSACTION 'eo-e2e-audit-test'")
    try:
        assert failing(generated[1], sink_json(ledger), healthy_pipeline()) == {
            "prepared transactions left"
        }
    finally:
        with psycopg.connect(ledger, autocommit=True) as conn:
            conn.execute("ROLLBACK PREPARED 'eo-e2e-audit-test'")


@pytest.mark.parametrize(
    ("field", "value", "check"),
    [
        ("phase", "Recovering", "status.phase"),
        ("epoch", FIRST_EPOCH + 1, "status.epoch"),
        ("epoch", None, "status.epoch"),
        ("restarts", 0, "status.restarts"),
        ("inDoubtTransactions", 2, "status.inDoubtTransactions"),
    ],
)
def test_the_audit_fails_a_pipeline_status_that_does_not_show_the_recoveries(
    generated: tuple[Path, dict[str, Any]], field: str, value: object, check: str
) -> None:
    truth = generated[1]
    exact_sink = {
        "rows": truth["valid"],
        "distinct_orders": truth["valid"],
        "order_id_sum": truth["order_id_sum"],
        "non_positive": 0,
        "merchants": truth["merchants"],
        "dead_letters": truth["malformed"],
        "prepared": 0,
    }
    pipeline = healthy_pipeline()
    assert failing(truth, exact_sink, pipeline) == set()
    pipeline["status"][field] = value
    assert failing(truth, exact_sink, pipeline) == {check}


def test_the_audit_table_names_each_failing_check_and_the_merchant_at_fault(
    generated: tuple[Path, dict[str, Any]],
) -> None:
    truth = generated[1]
    merchants = json.loads(json.dumps(truth["merchants"]))
    first = sorted(merchants)[0]
    merchants[first]["amount_cents"] += 7
    sink = {
        "rows": truth["valid"],
        "distinct_orders": truth["valid"],
        "order_id_sum": truth["order_id_sum"],
        "non_positive": 0,
        "merchants": merchants,
        "dead_letters": truth["malformed"],
        "prepared": 0,
    }
    rows = audit.checks(truth, sink, healthy_pipeline(), FIRST_EPOCH, DISRUPTIONS)
    notes = [f"merchant mismatch: {line}" for line in audit.merchant_mismatches(truth, sink)]
    table = audit.render(rows, notes)
    assert "merchants with exact rows and sums" in table and "FAIL" in table
    assert f"merchant mismatch: {first}: expected" in table
    assert table.endswith("RESULT: MISMATCH (see the FAIL rows above)")
