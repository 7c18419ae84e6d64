"""The physical ceiling: PostgreSQL's ``COPY`` of the same rows from a file, without Spark.

The events are written once as CSV (one piece per input file, so a batch is the same rows as a
Spark batch); every batch is then copied by as many connections as the Spark variants have
writer tasks, each ``COPY ... FROM STDIN (FORMAT csv)`` of its share streamed from the file
and committed, the batch done when all are. Connections stay open across batches and nothing
is parsed in Python: this is what the database takes on this machine, the bound no writer on
top of it can pass.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from bench import data, runner

READ_BYTES = 1 << 20


@dataclass(frozen=True)
class CsvFile:
    """The events as CSV, and where each piece (one input file's rows) starts."""

    path: Path
    offsets: tuple[int, ...]
    """Byte offset of piece i; the last entry is the file's size."""

    def span(self, first_piece: int, pieces: int) -> tuple[int, int]:
        """(start, end) bytes of ``pieces`` consecutive pieces."""
        return self.offsets[first_piece], self.offsets[first_piece + pieces]


def write_csv(path: Path, pieces: int, rows_per_piece: int) -> CsvFile:
    """Orders ``0 .. pieces*rows_per_piece-1`` as CSV, ``rows_per_piece`` to a piece."""
    offsets = [0]
    with path.open("wb") as out:
        for piece in range(pieces):
            for chunk in data.csv_chunks(piece * rows_per_piece, rows_per_piece):
                out.write(chunk)
            offsets.append(out.tell())
    return CsvFile(path, tuple(offsets))


def _copy(conn: psycopg.Connection[object], file: Path, span: tuple[int, int], table: str) -> None:
    schema, _, name = table.partition(".")
    statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(
        sql.Identifier(schema, name), sql.SQL(", ").join(map(sql.Identifier, data.COLUMNS))
    )
    start, end = span
    with file.open("rb") as source, conn.cursor() as cur, cur.copy(statement) as copy:
        source.seek(start)
        left = end - start
        while left > 0:
            chunk = source.read(min(READ_BYTES, left))
            if not chunk:
                break
            copy.write(chunk)
            left -= len(chunk)
    conn.commit()


def run(
    dsn: str,
    table: str,
    csv: CsvFile,
    batches: int,
    pieces_per_batch: int,
    partitions: int,
    log: Path,
) -> runner.Run:
    """COPY ``batches`` batches of ``pieces_per_batch`` pieces each; timed like a driver."""
    started = time.monotonic()
    timed: list[runner.Batch] = []
    writers = min(partitions, pieces_per_batch)
    connections = [psycopg.connect(dsn) for _ in range(writers)]
    try:
        with ThreadPoolExecutor(writers) as pool, log.open("w") as out:
            for batch_id in range(batches):
                first = batch_id * pieces_per_batch
                # Split the batch's pieces into contiguous shares, one per connection.
                bounds = [first + pieces_per_batch * w // writers for w in range(writers + 1)]
                shares = [
                    csv.span(bounds[w], bounds[w + 1] - bounds[w])
                    for w in range(writers)
                    if bounds[w + 1] > bounds[w]
                ]
                began = time.perf_counter()
                list(
                    pool.map(
                        lambda job: _copy(job[0], csv.path, job[1], table),
                        zip(connections, shares, strict=False),
                    )
                )
                seconds = time.perf_counter() - began
                timed.append(runner.Batch(batch_id, seconds, time.monotonic()))
                out.write(f'{{"event": "batch", "batch": {batch_id}, "seconds": {seconds}}}\n')
    finally:
        for conn in connections:
            conn.close()
    return runner.Run(0, time.monotonic() - started, tuple(timed), log)
