"""A table a user already has takes eo's rows as it is: unwritten columns, quoted names, types.

Issue 27 item 3: identity, bigserial, defaulted and generated columns the pipeline does not
write; column names that need quoting (mixed case, a reserved word, a space); PostgreSQL's
common types (integer widths, real/double, numeric, boolean, dates and instants far from 1970,
uuid, jsonb, varchar(n)/char(n)/text, an enum, a text array, bytea). Real `eo run` drivers into
a real PostgreSQL, through whichever writer eo picks and through the Python writer forced, in
append and upsert mode; every value is read back and compared with what the record said.
"""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from tests.runtime import harness

from eo_jobs.protocol.errors import EXIT_SINK_CONTRACT

pytestmark = pytest.mark.spark

TABLE_DDL = """
CREATE TYPE public.mood AS ENUM ('calm', 'busy');
CREATE TABLE public.user_ledger (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    serial_no bigserial,
    "Order Id" bigint NOT NULL UNIQUE,
    "select" text,
    "mixed Case" integer,
    small smallint,
    amount numeric(12, 2),
    ratio double precision,
    r4 real,
    flag boolean,
    "Day" date,
    ts timestamptz,
    wall timestamp,
    uid uuid,
    doc jsonb,
    mood public.mood,
    short_code varchar(20),
    code3 char(3),
    tags text[],
    blob bytea,
    created_at timestamptz NOT NULL DEFAULT now(),
    doubled bigint GENERATED ALWAYS AS ("Order Id" * 2) STORED
)"""

SCHEMA = (
    "id BIGINT, note STRING, amount STRING, ratio DOUBLE, flag BOOLEAN, day STRING, ts STRING, "
    "uid STRING, doc STRING, mood STRING, tags ARRAY<STRING>, blob STRING"
)
TRANSFORM = (
    "SELECT id AS `Order Id`, note AS `select`, CAST(id AS INT) AS `mixed Case`, "
    "CAST(id AS SMALLINT) AS small, CAST(amount AS DECIMAL(12,2)) AS amount, ratio, "
    "CAST(ratio AS FLOAT) AS r4, flag, CAST(day AS DATE) AS `Day`, CAST(ts AS TIMESTAMP) AS ts, "
    "CAST(ts AS TIMESTAMP_NTZ) AS wall, uid, doc, mood, note AS short_code, "
    "substr(note, 1, 3) AS code3, tags, unbase64(blob) AS blob FROM source"
)

RECORDS = [
    {
        "id": 1,
        "note": "café €",
        "amount": "12345678.91",
        "ratio": 0.1,
        "flag": True,
        "day": "1900-01-01",
        "ts": "1850-06-01T12:00:00Z",
        "uid": "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
        "doc": '{"a": [1, 2], "b": null}',
        "mood": "calm",
        "tags": ["x", "y z"],
        "blob": "AAEC/w==",
    },
    {
        "id": 2,
        "note": "tab\there",
        "amount": "-0.01",
        "ratio": -1.5e30,
        "flag": False,
        "day": "2200-12-31",
        "ts": "2262-04-11T23:47:16Z",
        "uid": "00000000-0000-0000-0000-000000000000",
        "doc": "[]",
        "mood": "busy",
        "tags": [],
        "blob": "",
    },
    {
        "id": 3,
        "note": None,
        "amount": None,
        "ratio": None,
        "flag": None,
        "day": None,
        "ts": None,
        "uid": None,
        "doc": None,
        "mood": None,
        "tags": None,
        "blob": None,
    },
]

READ_BACK = (
    'SELECT "Order Id", "select", "mixed Case", small, amount, ratio, r4, flag, "Day", ts, wall, '
    "uid, doc, mood::text, short_code, code3, tags, blob, doubled, id IS NOT NULL, "
    "serial_no IS NOT NULL, created_at IS NOT NULL "
    'FROM public.user_ledger ORDER BY "Order Id"'
)


def _expected(record: dict[str, object]) -> tuple[object, ...]:
    note = record["note"]
    ts = record["ts"]
    instant = datetime.fromisoformat(str(ts)) if ts is not None else None
    blob = record["blob"]
    return (
        record["id"],
        note,
        record["id"],
        record["id"],
        Decimal(str(record["amount"])) if record["amount"] is not None else None,
        record["ratio"],
        pytest.approx(record["ratio"], rel=1e-6) if record["ratio"] is not None else None,
        record["flag"],
        date.fromisoformat(str(record["day"])) if record["day"] is not None else None,
        instant,
        instant.astimezone(UTC).replace(tzinfo=None) if instant is not None else None,
        uuid.UUID(str(record["uid"])) if record["uid"] is not None else None,
        json.loads(str(record["doc"])) if record["doc"] is not None else None,
        record["mood"],
        note,
        (str(note)[:3].ljust(3)) if note is not None else None,
        record["tags"],
        base64.b64decode(str(blob)) if blob is not None else None,
        2 * int(str(record["id"])),
        True,
        True,
        True,
    )


def _pipeline(work: Path, mode: str) -> Path:
    keys = ", mode: upsert, keyColumns: [Order Id], versionColumn: small"
    upsert = keys if mode == "upsert" else ""
    spec = work / "pipeline.yaml"
    spec.write_text(f"""apiVersion: eo.dev/v1alpha1
kind: ExactlyOncePipeline
metadata: {{name: orders, namespace: test}}
spec:
  source:
    files: {{path: "{work / "in"}", format: json, schema: "{SCHEMA}"}}
  transform: {{sql: "{TRANSFORM}"}}
  sinks:
    - name: ledger
      postgres: {{dsn: {{env: TEST_DSN}}, table: public.user_ledger, writerPartitions: 2{upsert}}}
  checkpoint: {{location: "{work / "checkpoint"}", triggerIntervalSeconds: 0}}
  driver: {{cores: 2, memory: 768m}}
""")
    return spec


@pytest.mark.parametrize(
    ("mode", "writer"),
    [("append", "auto"), ("append", "python"), ("upsert", "auto")],
)
def test_every_common_column_type_and_quoted_name_lands_value_for_value(
    tmp_path: Path, pg_dsn: str, mode: str, writer: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(TABLE_DDL)
    (tmp_path / "in").mkdir()
    lines = [json.dumps(r, ensure_ascii=False) for r in RECORDS]
    (tmp_path / "in" / "part-0.json").write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out = harness.run(
        _pipeline(tmp_path, mode), 1, pg_dsn, extra_env={"EO_WRITER": writer, "TZ": "UTC"}
    )
    assert code == 0, out
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(READ_BACK).fetchall()
        dead = conn.execute("SELECT raw, reason FROM public.user_ledger_dead_letter").fetchall()
    assert dead == []
    assert [tuple(r) for r in rows] == [_expected(r) for r in RECORDS]


def test_a_spark_type_the_column_cannot_hold_stops_the_driver_before_the_first_batch(
    tmp_path: Path, pg_dsn: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(TABLE_DDL)
    (tmp_path / "in").mkdir()
    lines = [json.dumps(r, ensure_ascii=False) for r in RECORDS]
    (tmp_path / "in" / "part-0.json").write_text("\n".join(lines) + "\n", encoding="utf-8")
    spec = _pipeline(tmp_path, "append")
    # flag (boolean) into "mixed Case" (integer), and an instant into a date column.
    sql = TRANSFORM.replace("CAST(id AS INT) AS `mixed Case`", "flag AS `mixed Case`")
    sql = sql.replace("CAST(day AS DATE) AS `Day`", "CAST(ts AS TIMESTAMP) AS `Day`")
    spec.write_text(spec.read_text().replace(TRANSFORM, sql))
    code, out = harness.run(spec, 1, pg_dsn)
    assert code == EXIT_SINK_CONTRACT, out
    assert "column mixed Case: Spark type boolean cannot go into" in out, out
    assert "CAST(mixed Case AS INT)" in out, out
    assert "column Day: Spark type timestamp cannot go into" in out, out
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM public.user_ledger").fetchone() == (0,)
