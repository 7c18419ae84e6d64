"""Records the table refuses are dead letters in the same decided batch; the rest lands once.

Real `eo run` drivers (local Spark) into a real PostgreSQL, through both writers (the JVM one,
and the Python one with ``EO_WRITER=python``), append and upsert. One table carries one
refusal class per constraint, so one driver run covers every class: NOT NULL (23502),
varchar(n) (22001), CHECK (23514), foreign key (23503), unique (23505), a date PostgreSQL
cannot hold (22008); a second sink on another database refuses some of the same records and
keeps their dead letters in a table of its own database. A LATIN1 database covers a character
the encoding cannot hold (22P05) and text that must not turn into mojibake.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from tests.runtime import harness
from tests.support.postgres import PREPARED_HERE

from eo_jobs.pgserver import PgServer

pytestmark = pytest.mark.spark

SCHEMA = (
    "order_id BIGINT, merchant STRING, amount_cents BIGINT, customer BIGINT, day_offset INT, "
    "code STRING"
)
TRANSFORM = (
    "SELECT order_id, merchant, amount_cents, customer, "
    "date_add(DATE '2026-01-01', day_offset) AS day, code FROM source"
)
ORDERS_DDL = """
CREATE TABLE public.customers (id bigint PRIMARY KEY);
INSERT INTO public.customers VALUES (1), (2);
CREATE TABLE public.orders (
  id bigserial,
  order_id bigint NOT NULL UNIQUE,
  merchant varchar(8) NOT NULL,
  amount_cents bigint CHECK (amount_cents >= 0),
  customer bigint REFERENCES public.customers (id),
  day date,
  code text UNIQUE,
  updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO public.orders (order_id, merchant, code) VALUES (1000, 'pre', 'taken');
"""
OTHER_DDL = (
    "CREATE TABLE public.orders (order_id bigint, merchant varchar(8) NOT NULL, "
    "amount_cents bigint, customer bigint, day date, code text)"
)
GOOD = range(40)
REFUSED = {
    # order_id: (the record's changed fields, SQLSTATE, what the reason must name)
    100: ({"merchant": None}, "23502", "column merchant"),
    101: ({"merchant": "much-too-long"}, "22001", "column merchant"),
    102: ({"amount_cents": -5}, "23514", "constraint orders_amount_cents_check"),
    103: ({"customer": 99}, "23503", "constraint orders_customer_fkey"),
    104: ({"code": "taken"}, "23505", "constraint orders_code_key"),
    105: ({"day_offset": -3_000_000}, "22008", "column day"),
}
REFUSED_BY_OTHER = (100, 101, 105)


def _record(order_id: int, **changed: object) -> str:
    record: dict[str, object] = {
        "order_id": order_id,
        "merchant": f"m{order_id % 5}",
        "amount_cents": order_id,
        "customer": 1 + order_id % 2,
        "day_offset": order_id,
        "code": f"c{order_id}",
    }
    record.update(changed)
    return json.dumps(record)


def _input(folder: Path) -> None:
    """Good records with the refused ones among them (pieces around them are written)."""
    lines = [_record(i) for i in GOOD]
    for position, (order_id, (changed, _, _)) in enumerate(sorted(REFUSED.items())):
        lines.insert(3 + position * 6, _record(order_id, **changed))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "part-0.json").write_text("\n".join(lines) + "\n")


def _pipeline(work: Path, mode: str, on_refused: str = "deadLetter", other: bool = True) -> Path:
    upsert = ", mode: upsert, keyColumns: [order_id]" if mode == "upsert" else ""
    # deadLetter is the default: the first test leaves it out.
    refused = "" if on_refused == "deadLetter" else f", onRefusedRecord: {on_refused}"
    second = (
        """
    - name: other
      postgres: {dsn: {env: TEST_DSN2}, table: public.orders, writerPartitions: 1}"""
        if other
        else ""
    )
    spec = work / "pipeline.yaml"
    spec.write_text(f"""apiVersion: eo.dev/v1alpha1
kind: ExactlyOncePipeline
metadata: {{name: orders, namespace: test}}
spec:
  source:
    files: {{path: "{work / "in"}", format: json, schema: "{SCHEMA}"}}
  transform: {{sql: "{TRANSFORM}"}}
  sinks:
    - name: orders
      postgres: {{dsn: {{env: TEST_DSN}}, table: public.orders,
                 writerPartitions: 1{refused}{upsert}}}{second}
  checkpoint: {{location: "{work / "checkpoint"}", triggerIntervalSeconds: 0}}
  driver: {{cores: 2, memory: 768m}}
""")
    return spec


def _sql(dsn: str, statement: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement)
        return cur.fetchall() if cur.description else []


def _writer_env(writer: str) -> dict[str, str]:
    return {"EO_WRITER": "python"} if writer == "python" else {}


def _writer_events(out: str) -> list[tuple[str, str]]:
    events = [
        json.loads(line) for line in out.splitlines() if line.startswith('{"event": "writer"')
    ]
    return [(e["sink"], e["path"]) for e in events]


@pytest.mark.parametrize("mode", ["append", "upsert"])
@pytest.mark.parametrize("writer", ["jvm", "python"])
def test_a_record_the_table_refuses_becomes_a_dead_letter_and_the_rest_lands_once(
    tmp_path: Path, pg_dsn: str, pg_server: PgServer, writer: str, mode: str
) -> None:
    other_dsn = pg_server.create_database(f"other_{uuid.uuid4().hex[:12]}")
    _sql(pg_dsn, ORDERS_DDL)
    _sql(other_dsn, OTHER_DDL)
    _input(tmp_path / "in")
    spec = _pipeline(tmp_path, mode)

    code, out = harness.run(
        spec, 1, pg_dsn, extra_env={"TEST_DSN2": other_dsn, **_writer_env(writer)}
    )

    assert code == 0, out
    assert set(_writer_events(out)) == {("orders", writer), ("other", writer)}, out
    ids = [r[0] for r in _sql(pg_dsn, "SELECT order_id FROM public.orders ORDER BY order_id")]
    assert ids == [*GOOD, 1000]
    stored = _sql(pg_dsn, "SELECT count(*) FROM public.orders WHERE updated_at IS NOT NULL")
    assert stored == [(len(GOOD) + 1,)]  # the columns the pipeline does not write took defaults
    dead = _sql(pg_dsn, "SELECT batch_id, raw, reason FROM public.orders_dead_letter")
    by_order = {
        json.loads(str(raw))["order_id"]: (batch, str(reason)) for batch, raw, reason in dead
    }
    assert sorted(by_order) == sorted(REFUSED), dead
    for order_id, (_, sqlstate, named) in REFUSED.items():
        batch, reason = by_order[order_id]
        assert batch == 0
        assert reason.startswith("public.orders refused the record: "), reason
        assert f"SQLSTATE {sqlstate}" in reason and named in reason, (order_id, reason)
    assert "null value in column" in by_order[100][1]
    assert "value too long for type character varying(8)" in by_order[101][1]
    assert "date out of range" in by_order[105][1]
    # The second sink's database keeps its own refusals in a dead-letter table made there.
    other = [r[0] for r in _sql(other_dsn, "SELECT order_id FROM public.orders ORDER BY 1")]
    assert other == sorted([*GOOD, *(set(REFUSED) - set(REFUSED_BY_OTHER))])
    other_dead = _sql(other_dsn, "SELECT raw, reason FROM public.orders_dead_letter")
    assert sorted(json.loads(str(r[0]))["order_id"] for r in other_dead) == list(REFUSED_BY_OTHER)
    assert all("SQLSTATE" in str(r[1]) for r in other_dead), other_dead
    assert _sql(pg_dsn, PREPARED_HERE) == []


@pytest.mark.parametrize("writer", ["jvm", "python"])
def test_on_refused_record_fail_stops_naming_the_batch_the_column_and_the_message(
    tmp_path: Path, pg_dsn: str, writer: str
) -> None:
    _sql(pg_dsn, ORDERS_DDL)
    folder = tmp_path / "in"
    folder.mkdir()
    lines = [_record(i) for i in range(5)] + [_record(100, merchant=None)]
    (folder / "part-0.json").write_text("\n".join(lines) + "\n")
    spec = _pipeline(tmp_path, "append", on_refused="fail", other=False)

    code, out = harness.run(spec, 1, pg_dsn, extra_env=_writer_env(writer))

    assert code == 1, out
    assert (
        "batch 0: public.orders refused a record (onRefusedRecord: fail): SQLSTATE 23502, "
        'column merchant: null value in column "merchant"'
    ) in out, out
    assert _sql(pg_dsn, "SELECT count(*) FROM public.orders") == [(1,)]
    assert _sql(pg_dsn, PREPARED_HERE) == []


@pytest.mark.parametrize("writer", ["jvm", "python"])
def test_text_lands_as_itself_in_a_latin1_database_and_a_character_it_cannot_hold_is_refused(
    tmp_path: Path, pg_dsn: str, writer: str
) -> None:
    name = f"latin1_{uuid.uuid4().hex[:12]}"
    _sql(
        pg_dsn,
        sql.SQL(
            "CREATE DATABASE {} TEMPLATE template0 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'"
        )
        .format(sql.Identifier(name))
        .as_string(),
    )
    latin1 = psycopg.conninfo.make_conninfo(pg_dsn, dbname=name)
    harness.create_table(latin1)
    lines = [
        json.dumps({"order_id": 1, "merchant": "café", "amount_cents": 1}),
        json.dumps({"order_id": 2, "merchant": "€uro", "amount_cents": 2}),
        json.dumps({"order_id": 3, "merchant": "plain", "amount_cents": 3}),
    ]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-0.json").write_text("\n".join(lines) + "\n", encoding="utf-8")
    spec = harness.files_pipeline(tmp_path)

    code, out = harness.run(spec, 1, latin1, extra_env=_writer_env(writer))

    assert code == 0, out
    with psycopg.connect(latin1) as conn:
        conn.execute("SET client_encoding = 'UTF8'")
        rows = conn.execute("SELECT order_id, merchant FROM public.orders ORDER BY 1").fetchall()
        dead = conn.execute("SELECT raw, reason FROM public.orders_dead_letter").fetchall()
    assert rows == [(1, "café"), (3, "plain")]
    assert len(dead) == 1 and json.loads(dead[0][0])["merchant"] == "€uro", dead
    assert "SQLSTATE 22P05" in dead[0][1], dead


def test_a_malformed_record_that_is_not_utf8_is_a_dead_letter_through_the_python_writer(
    tmp_path: Path, pg_dsn: str
) -> None:
    harness.create_table(pg_dsn)
    good = [json.dumps({"order_id": i, "merchant": f"m{i}", "amount_cents": i}) for i in range(5)]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-0.json").write_bytes(
        "\n".join(good).encode() + b'\n{"order_id": 9, "merchant": "caf\xe9"}\n'
    )
    spec = harness.files_pipeline(tmp_path)

    code, out = harness.run(spec, 1, pg_dsn, extra_env={"EO_WRITER": "python"})

    assert code == 0, out
    ids = [r[0] for r in _sql(pg_dsn, "SELECT order_id FROM public.orders ORDER BY 1")]
    assert ids == list(range(5))
    dead = _sql(pg_dsn, "SELECT raw FROM public.orders_dead_letter")
    assert [str(r[0]) for r in dead] == ['{"order_id": 9, "merchant": "caf\ufffd"}'], dead
