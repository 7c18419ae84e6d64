"""What a record holds is what the sink stores: instants, wall times, NUL bytes, NULL keys.

Real `eo run` drivers (local Spark) into a real PostgreSQL whose session time zone differs from
the driver's, so any conversion through a local wall time shows up as a shifted instant.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from tests.runtime import harness

pytestmark = pytest.mark.spark

# Instants on both sides of Europe/Berlin's fall-back (2026-10-25 01:00Z: 02:00-03:00 local
# happens twice) and of America/New_York's (2026-11-01 06:00Z), plus a winter and a summer one.
INSTANTS = [
    "2026-01-01T00:00:00Z",
    "2026-07-01T12:34:56.789Z",
    "2026-10-25T00:30:00Z",
    "2026-10-25T01:30:00Z",
    "2026-11-01T05:30:00Z",
    "2026-11-01T06:30:00Z",
]
WALL_TIMES = ["2026-03-29T02:30:00", "2026-10-25T02:30:00", "2026-11-01T01:30:00"]


def _pipeline(work: Path, schema: str, table: str, extra_sink: str = "") -> Path:
    spec = work / "pipeline.yaml"
    spec.write_text(f"""apiVersion: eo.dev/v1alpha1
kind: ExactlyOncePipeline
metadata: {{name: orders, namespace: test}}
spec:
  source:
    files: {{path: "{work / "in"}", format: json, schema: "{schema}"}}
  sinks:
    - name: orders
      postgres: {{dsn: {{env: TEST_DSN}}, table: {table}, writerPartitions: 2{extra_sink}}}
  checkpoint: {{location: "{work / "checkpoint"}", triggerIntervalSeconds: 0}}
  driver: {{cores: 2, memory: 768m}}
""")
    return spec


def _write_lines(folder: Path, lines: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "part-0.json").write_text("\n".join(lines) + "\n")


def _sql(dsn: str, statement: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement)
        return cur.fetchall() if cur.description else []


def test_instants_arrive_unchanged_whatever_the_driver_and_server_time_zones(
    tmp_path: Path, pg_dsn: str
) -> None:
    dbname = psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"]
    _sql(pg_dsn, f"ALTER DATABASE \"{dbname}\" SET timezone = 'America/New_York'")
    _sql(
        pg_dsn,
        "CREATE TABLE public.events (id bigint NOT NULL, at timestamptz, wall timestamp)",
    )
    lines = [
        json.dumps({"id": i, "at": at, "wall": WALL_TIMES[i % len(WALL_TIMES)]})
        for i, at in enumerate(INSTANTS)
    ]
    _write_lines(tmp_path / "in", lines)
    spec = _pipeline(tmp_path, "id BIGINT, at TIMESTAMP, wall TIMESTAMP_NTZ", "public.events")
    code, out = harness.run(spec, 1, pg_dsn, extra_env={"TZ": "Europe/Berlin"})
    assert code == 0, out
    rows = _sql(pg_dsn, "SELECT id, at, wall FROM public.events ORDER BY id")
    stored = {int(r[0]): (r[1], r[2]) for r in rows}  # type: ignore[call-overload]
    assert len(stored) == len(INSTANTS)
    for i, at in enumerate(INSTANTS):
        expected = datetime.fromisoformat(at.replace("Z", "+00:00"))
        got_at, got_wall = stored[i]
        assert isinstance(got_at, datetime)
        assert got_at.astimezone(UTC) == expected, (i, at, got_at)
        assert got_wall == datetime.fromisoformat(WALL_TIMES[i % len(WALL_TIMES)]), (i, got_wall)


def test_a_record_with_a_nul_character_becomes_a_dead_letter_and_the_rest_lands(
    tmp_path: Path, pg_dsn: str
) -> None:
    harness.create_table(pg_dsn)
    lines = [json.dumps({"order_id": i, "merchant": f"m{i}", "amount_cents": i}) for i in range(50)]
    lines[7] = json.dumps({"order_id": 7, "merchant": "bad\u0000name", "amount_cents": 7})
    lines[8] = '{"order_id": 8, "merchant": "x\u0000\u0000y", "amount_cents": 8'
    _write_lines(tmp_path / "in", lines)
    spec = harness.files_pipeline(tmp_path)
    code, out = harness.run(spec, 1, pg_dsn)
    assert code == 0, out
    ids = sorted(int(r[0]) for r in _sql(pg_dsn, "SELECT order_id FROM public.orders"))  # type: ignore[call-overload]
    assert ids == [i for i in range(50) if i not in (7, 8)]
    dead = _sql(pg_dsn, "SELECT raw, reason FROM public.orders_dead_letter ORDER BY raw")
    assert len(dead) == 2, dead
    raws = " ".join(str(r[0]) for r in dead)
    assert "bad\\u0000name" in raws and "x\\u0000\\u0000y" in raws
    assert any("NUL" in str(r[1]) for r in dead), dead


def test_upsert_rows_with_a_null_key_become_dead_letters_not_duplicates(
    tmp_path: Path, pg_dsn: str
) -> None:
    _sql(
        pg_dsn,
        "CREATE TABLE public.accounts (id bigint PRIMARY KEY, balance bigint, version bigint)",
    )
    lines = [json.dumps({"id": i % 5, "balance": i, "version": i}) for i in range(20)]
    lines += [json.dumps({"id": None, "balance": 1, "version": 1}) for _ in range(3)]
    _write_lines(tmp_path / "in", lines)
    spec = _pipeline(
        tmp_path,
        "id BIGINT, balance BIGINT, version BIGINT",
        "public.accounts",
        ", mode: upsert, keyColumns: [id], versionColumn: version",
    )
    code, out = harness.run(spec, 1, pg_dsn)
    assert code == 0, out
    rows = dict(_sql(pg_dsn, "SELECT id, balance FROM public.accounts"))  # type: ignore[arg-type]
    assert rows == {k: 15 + k for k in range(5)}
    dead = _sql(pg_dsn, "SELECT reason FROM public.accounts_dead_letter")
    assert len(dead) == 3 and all("id" in str(r[0]) and "NULL" in str(r[0]) for r in dead), dead
