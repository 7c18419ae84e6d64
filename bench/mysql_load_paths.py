"""Load paths into MySQL/MariaDB inside one XA branch, measured (a quick script, not a test).

200,000 rows of ``(BIGINT, VARCHAR(32), DECIMAL(18,2), DATETIME(6))`` into an InnoDB table,
timed from ``XA START`` to ``XA PREPARE`` (then committed and counted), one connection:

* ``executemany``: PyMySQL's own multi-row rewrite (~1 MB statements), chunks of N rows;
* ``statements``: multi-row statements built from PyMySQL literals, at most N characters
  (what ``MySqlWriter`` does);
* ``writer``: ``MySqlWriter.write_on`` itself (session settings, literals, marker row);
* ``writer from Arrow``: what a Spark task runs, from one 200,000-row Arrow record batch (the
  Spark types: ``TIMESTAMP`` an instant): ``arrow_rows.python_rows`` then ``write_on`` (the
  old task), or ``write_arrow_on`` (literals built by ``arrow_literals``);
* ``load data``: ``LOAD DATA LOCAL INFILE`` of the rows as CSV (Python's ``csv``), from a
  temporary file or streamed through a named pipe (PyMySQL opens the file name it is given,
  so a FIFO fed by a thread streams without a file on disk). Under a ``SAVEPOINT``, and
  ``@@warning_count`` read after it: ``LOCAL`` turns every data error into a warning (NULL
  stored as 0, long strings cut, duplicate keys skipped), so a path that keeps refused rows
  must roll back to the savepoint on any warning and write those rows another way.

Run: ``python -m bench.mysql_load_paths [repeats] [--port PORT] [--only WORD]`` (``--only``:
the paths whose label holds WORD, e.g. ``Arrow``) (without a port it starts a
temporary MariaDB server, as the tests do). Figures: docs/mysql.md, "Load path".
"""

from __future__ import annotations

import argparse
import csv
import os
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, TypeAlias

import pymysql

from eo_jobs.sinks.mysql.writer import MySqlWriter

ROWS = 200_000
DATABASE = "eo_bench"
COLUMNS = ("id", "name", "amount", "at")
INSERT = "INSERT INTO t (id, name, amount, at) VALUES (%s, %s, %s, %s)"
LOAD = (
    "LOAD DATA LOCAL INFILE %s INTO TABLE t CHARACTER SET utf8mb4 FIELDS TERMINATED BY ',' "
    "OPTIONALLY ENCLOSED BY '\"' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n' "
    "(id, name, amount, at)"
)
Conn: TypeAlias = "pymysql.Connection[Any]"


def rows() -> list[tuple[Any, ...]]:
    base = datetime(2026, 1, 1)
    return [
        (
            i,
            f"merchant-{i % 997:05d}-{i:012d}",
            Decimal(i % 100_000) / 100,
            base + timedelta(seconds=i, microseconds=i % 1000),
        )
        for i in range(ROWS)
    ]


def executemany(chunk: int) -> Callable[[Conn, list[tuple[Any, ...]]], None]:
    def run(conn: Conn, data: list[tuple[Any, ...]]) -> None:
        with conn.cursor() as cur:
            for i in range(0, len(data), chunk):
                cur.executemany(INSERT, data[i : i + chunk])

    return run


def statements(max_chars: int) -> Callable[[Conn, list[tuple[Any, ...]]], None]:
    def run(conn: Conn, data: list[tuple[Any, ...]]) -> None:
        prefix = "INSERT INTO t (id, name, amount, at) VALUES "
        parts: list[str] = []
        size = len(prefix)
        with conn.cursor() as cur:
            for row in data:
                literal = "(" + ",".join([conn.escape(v) for v in row]) + ")"
                if parts and size + len(literal) + 1 > max_chars:
                    cur.execute(prefix + ",".join(parts))
                    parts, size = [], len(prefix)
                parts.append(literal)
                size += len(literal) + 1
            if parts:
                cur.execute(prefix + ",".join(parts))

    return run


def load_data(via: str) -> Callable[[Conn, list[tuple[Any, ...]]], None]:
    def produce(path: str, data: list[tuple[Any, ...]]) -> None:
        with open(path, "w", newline="", encoding="utf-8") as out:
            write = csv.writer(out, lineterminator="\n", escapechar="\\", doublequote=False)
            write.writerows(data)

    def run(conn: Conn, data: list[tuple[Any, ...]]) -> None:
        folder = tempfile.mkdtemp(prefix="eo-load-")
        path = os.path.join(folder, "rows.csv")
        try:
            with conn.cursor() as cur:
                cur.execute("SAVEPOINT eo_load")
                if via == "fifo":
                    os.mkfifo(path)
                    feeder = threading.Thread(target=produce, args=(path, data))
                    feeder.start()
                    cur.execute(LOAD, (path,))
                    feeder.join()
                else:
                    produce(path, data)
                    cur.execute(LOAD, (path,))
                cur.execute("SELECT @@warning_count")
                found = cur.fetchone()
                if found is None or found[0]:
                    raise RuntimeError(f"LOAD DATA warned: {found}")
                cur.execute("RELEASE SAVEPOINT eo_load")
        finally:
            if os.path.exists(path):
                os.unlink(path)
            os.rmdir(folder)

    return run


def timed(port: int, label: str, body: Callable[[Conn], None], local_infile: bool) -> float:
    with pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True) as setup:
        setup.cursor().execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        setup.select_db(DATABASE)
        with setup.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS t")
            cur.execute(
                "CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR(32) NOT NULL, "
                "amount DECIMAL(18,2), at DATETIME(6)) ENGINE=InnoDB"
            )
            cur.execute(
                "CREATE TABLE IF NOT EXISTS eo_markers (gid VARCHAR(200) PRIMARY KEY, "
                "pipeline VARCHAR(512), batch_id BIGINT, rows_written BIGINT, "
                "created_at TIMESTAMP(6) DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB"
            )
            cur.execute("DELETE FROM eo_markers")
    conn = pymysql.connect(
        host="127.0.0.1",
        port=port,
        user="root",
        database=DATABASE,
        autocommit=True,
        charset="utf8mb4",
        local_infile=local_infile,
    )
    try:
        started = time.perf_counter()
        body(conn)
        elapsed = time.perf_counter() - started
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM t")
            found = cur.fetchone()
        assert found is not None and found[0] == ROWS, found
    finally:
        conn.close()
    print(f"{label:44s} {elapsed:6.2f} s {ROWS / elapsed:9,.0f} rows/s", flush=True)
    return elapsed


def in_branch(
    path: Callable[[Conn, list[tuple[Any, ...]]], None], data: list[tuple[Any, ...]]
) -> Callable[[Conn], None]:
    def body(conn: Conn) -> None:
        with conn.cursor() as cur:
            cur.execute("XA START 'bench'")
            path(conn, data)
            cur.execute("XA END 'bench'")
            cur.execute("XA PREPARE 'bench'")
            cur.execute("XA COMMIT 'bench'")

    return body


def arrow_batch(data: list[tuple[Any, ...]]) -> Any:
    """The rows as the record batch Spark hands a writer task (an instant in UTC)."""
    import pyarrow as pa  # type: ignore[import-untyped]

    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("name", pa.string()),
            ("amount", pa.decimal128(18, 2)),
            ("at", pa.timestamp("us", tz="UTC")),
        ]
    )
    columns = list(zip(*data, strict=True))
    return pa.record_batch(
        [pa.array(c, f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )


def through_writer(
    port: int, data: list[tuple[Any, ...]], arrow: str | None = None
) -> Callable[[Conn], None]:
    from eo_jobs.protocol.gid import Gid

    writer = MySqlWriter(f"mysql://root@127.0.0.1:{port}/{DATABASE}", "t", COLUMNS)
    gid = str(
        Gid.build(
            pipeline="bench/load",
            query_id="00000000-0000-0000-0000-000000000000",
            sink="t",
            epoch=1,
            batch=0,
            task=0,
            attempt=0,
        )
    )

    batch = None if arrow is None else arrow_batch(data)

    def body(conn: Conn) -> None:
        if arrow == "python_rows":
            from eo_jobs.sinks.mysql.arrow_rows import python_rows

            rows = python_rows([batch])
            writer.write_on(conn, rows, gid=gid, pipeline="bench/load", batch_id=0)
        elif arrow == "arrow":
            writer.write_arrow_on(conn, [batch], gid=gid, pipeline="bench/load", batch_id=0)
        else:
            writer.write_on(conn, data, gid=gid, pipeline="bench/load", batch_id=0)
        with conn.cursor() as cur:
            from eo_jobs.protocol.mysql_xa import xid_of

            cur.execute(f"XA COMMIT {xid_of(gid, DATABASE).sql()}")

    return body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("repeats", type=int, nargs="?", default=1)
    parser.add_argument("--port", type=int, help="a MariaDB/MySQL on 127.0.0.1 (root, no password)")
    parser.add_argument("--only", default="", help="only the paths whose label holds this")
    args = parser.parse_args()
    server = None
    if args.port is None:
        from tests.support.mariadb import temporary_server

        server = temporary_server()
    port = args.port or (server.port if server else 0)
    data = rows()
    try:
        for _ in range(args.repeats):
            for label, body, infile in (
                ("executemany, 5,000-row chunks", in_branch(executemany(5000), data), False),
                ("executemany, 50,000-row chunks", in_branch(executemany(50_000), data), False),
                ("statements <= 1 M characters", in_branch(statements(1 << 20), data), False),
                ("statements <= 8 M characters", in_branch(statements(8 << 20), data), False),
                ("MySqlWriter.write_on (statements <= 1 M)", through_writer(port, data), False),
                (
                    "Arrow batch: python_rows + write_on",
                    through_writer(port, data, "python_rows"),
                    False,
                ),
                ("Arrow batch: write_arrow_on", through_writer(port, data, "arrow"), False),
                ("LOAD DATA LOCAL, temporary file", in_branch(load_data("file"), data), True),
                ("LOAD DATA LOCAL, named pipe", in_branch(load_data("fifo"), data), True),
            ):
                if args.only in label:
                    timed(port, label, body, infile)
            print(flush=True)
    finally:
        if server is not None:
            server.remove()


if __name__ == "__main__":
    main()
