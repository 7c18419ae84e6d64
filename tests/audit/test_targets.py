"""A pipeline spec becomes an audit target the same way for the operator and the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from eo_jobs.audit.targets import NotAppendOnlyError, report_sources_for, target_for
from eo_jobs.spec import load_pipeline

SPEC = """
apiVersion: eo.dev/v1alpha1
kind: ExactlyOncePipeline
metadata: {name: ledger, namespace: shop}
spec:
  source: {files: {path: /in, format: json, schema: "id BIGINT"}}
  sinks:
    - {name: ledger, postgres: {dsn: {env: A}, table: public.ledger}}
    - {name: accounts, postgres: {dsn: {env: B}, table: public.accounts, mode: upsert,
       keyColumns: [id]}}
  checkpoint: {location: /ckpt}
"""


def test_the_spec_gives_sinks_tables_checkpoint_and_dead_letters(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(SPEC)
    pipeline = load_pipeline(str(path))
    dsns = {"ledger": "dbname=a", "accounts": "dbname=b"}
    target = target_for(pipeline, dsns, "dbname=c", append_only=["ledger"],
                        batch_columns={"ledger": "batch_id"})  # fmt: skip
    assert target.pipeline == "shop/ledger" and target.control_dsn == "dbname=c"
    assert [(s.name, s.table, s.append_only, s.batch_column) for s in target.sinks] == [
        ("ledger", "public.ledger", True, "batch_id"),
        ("accounts", "public.accounts", False, None),
    ]
    assert target.checkpoint == "/ckpt" and target.dead_letters_dsn() == "dbname=a"
    sources = report_sources_for(pipeline, dsns, "dbname=c")
    assert sources.dead_letters == ("dbname=a", "public.ledger_dead_letter")
    with pytest.raises(NotAppendOnlyError, match="accounts is mode upsert"):
        target_for(pipeline, dsns, "dbname=c", append_only=["accounts"])


def test_sum_columns_and_accumulate_come_from_the_spec(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    totals = """    - {name: totals, postgres: {dsn: {env: C}, table: public.totals,
       mode: accumulate, keyColumns: [merchant], addColumns: [volume], sumColumns: [volume]}}
  checkpoint:"""
    path.write_text(
        SPEC.replace(
            "table: public.ledger}", "table: public.ledger, sumColumns: [amount]}"
        ).replace("  checkpoint:", totals)
    )
    pipeline = load_pipeline(str(path))
    target = target_for(pipeline, {"ledger": "a", "accounts": "b", "totals": "c"}, "c")
    assert [(s.name, s.sum_columns, s.accumulates) for s in target.sinks] == [
        ("ledger", ("amount",), False),
        ("accounts", (), False),
        ("totals", ("volume",), True),
    ]


def test_an_audit_column_from_the_spec_is_the_batch_column_eo_writes(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(SPEC.replace("table: public.ledger}", "table: public.ledger, auditColumn: b}"))
    target = target_for(load_pipeline(str(path)), {"ledger": "a", "accounts": "b"}, "c")
    assert [(s.name, s.batch_column, s.batch_column_by_eo, s.per_batch) for s in target.sinks] == [
        ("ledger", "b", True, True),
        ("accounts", None, False, False),
    ]
