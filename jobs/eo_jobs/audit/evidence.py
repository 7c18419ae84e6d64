"""Reading the evidence: the decision log (with the sums recorded per batch) from the control
database, markers, prepared transactions and table counts and sums from each sink database.
Only reads.

Every connection is opened read-only (``default_transaction_read_only``), so an auditor bug can
never repair, and therefore never hide, what it was meant to find. Each database is read in
one REPEATABLE READ transaction: a sink table's count and the markers beside it come from one
snapshot, and since a participant's rows and its marker commit together, they agree in every
snapshot unless something other than eo touched the table.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import sql

from eo_jobs.protocol.gid import Gid, pipeline_prefix, pipeline_token, query_token, sink_token
from eo_jobs.protocol.xa import PRUNED_PREFIX


@dataclass(frozen=True)
class LoggedDecision:
    """One row of ``eo.decisions``, as the audit needs it."""

    query_id: str
    batch_id: int
    epoch: int
    participants: tuple[str, ...]
    source_offsets: Any
    rows_written: int
    decided_at: datetime
    sums: Mapping[str, Mapping[str, Any] | None] | None = None
    """``eo.decisions.sums``: per sink with sum columns, column -> exact sum (decimal text) of
    the rows the batch wrote there, or None (no comparable sum); None when the decision
    records no sums (an eo older than sum columns, or no sink declares any)."""

    @property
    def token(self) -> str:
        """The query's component in gids and marker names."""
        return query_token(self.query_id)


@dataclass(frozen=True)
class ControlEvidence:
    """What the control database says about a pipeline."""

    has_tables: bool
    fence: int | None
    decisions: tuple[LoggedDecision, ...]
    """Per query, the anchor (the batch at the position, when it exists) and the batches after
    it, ordered by query and batch."""
    last_batch: Mapping[str, int]
    """Query id -> highest decided batch, whether or not this pass reads it."""
    now: datetime | None
    has_sums: bool = True
    """``eo.decisions`` has the ``sums`` column (an eo older than sum columns made it)."""


@dataclass(frozen=True)
class Marker:
    """A committed participant, as its marker row records it."""

    gid: str
    parsed: Gid
    batch_id: int
    rows: int


@dataclass(frozen=True)
class Prepared:
    """A participant still prepared."""

    gid: str
    parsed: Gid
    prepared_at: datetime


@dataclass
class SinkEvidence:
    """One sink's database, read in one snapshot."""

    sink: str
    has_markers: bool
    horizons: dict[str, int]
    """Query token -> the highest batch of that query whose markers pruning deleted here
    (``xa.horizon_gid``; batch ids start again at 0 when a query starts over)."""
    markers: dict[str, Marker] = field(default_factory=dict)
    """Gid -> marker, for this sink's participants above the lowest position."""
    prepared: dict[str, Prepared] = field(default_factory=dict)
    table_rows: int | None = None
    """count(*) of the table, when the count check reads it."""
    rows_by_batch: dict[int, int] = field(default_factory=dict)
    """batch id -> rows, from the declared batch column, above the lowest position."""
    table_sums: dict[str, Decimal] | None = None
    """Sum column -> the table's sum of it (0 for no rows), when the sum check reads it."""
    sums_by_batch: dict[int, dict[str, Decimal]] = field(default_factory=dict)
    """batch id -> sum column -> sum, from the declared batch column, above the lowest
    position (read with ``rows_by_batch``)."""
    missing_sum_columns: tuple[str, ...] = ()
    """Declared sum columns the table does not have (not summed)."""
    now: datetime | None = None


@contextlib.contextmanager
def reading(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A read-only, repeatable-read connection (one snapshot for everything read in it)."""
    with psycopg.connect(dsn, connect_timeout=10) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        with conn.transaction():
            yield conn


def read_control(
    dsn: str, pipeline: str, positions: Mapping[str, int], max_batches: int | None
) -> ControlEvidence:
    """The decisions after each query's position (at most ``max_batches`` per query).

    The batch at the position is read too (the anchor): the next batch's offsets start where
    its offsets end, and its epoch is the floor of the next one's.
    """
    with reading(dsn) as conn:
        row = conn.execute(
            "SELECT to_regclass('eo.decisions') IS NOT NULL AND to_regclass('eo.fence') "
            "IS NOT NULL, clock_timestamp()"
        ).fetchone()
        assert row is not None
        if not row[0]:
            return ControlEvidence(False, None, (), {}, row[1])
        now = row[1]
        has_sums = _has_sums(conn)
        fence = conn.execute(
            "SELECT epoch FROM eo.fence WHERE pipeline = %s", (pipeline,)
        ).fetchone()
        queries = conn.execute(
            "SELECT query_id, max(batch_id) FROM eo.decisions WHERE pipeline = %s "
            "GROUP BY query_id",
            (pipeline,),
        ).fetchall()
        decisions: list[LoggedDecision] = []
        for query_id, _ in queries:
            start = positions.get(query_token(str(query_id)), -1)
            limit = None if max_batches is None else max_batches + (start >= 0)
            query = sql.SQL(
                """SELECT query_id, batch_id, epoch, participants, source_offsets, rows_written,
                          decided_at, {sums}
                   FROM eo.decisions
                   WHERE pipeline = %s AND query_id = %s AND batch_id >= %s
                   ORDER BY batch_id LIMIT %s"""
            ).format(sums=_sums_column(has_sums))
            rows = conn.execute(query, (pipeline, query_id, start, limit)).fetchall()
            decisions.extend(_decision(row) for row in rows)
    return ControlEvidence(
        True,
        None if fence is None else int(fence[0]),
        tuple(decisions),
        {str(q): int(b) for q, b in queries},
        now,
        has_sums,
    )


def _has_sums(conn: psycopg.Connection[Any]) -> bool:
    """Whether ``eo.decisions`` has the ``sums`` column (``ensure_schema`` adds it)."""
    row = conn.execute(
        """SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'eo.decisions'::regclass
                            AND attname = 'sums' AND NOT attisdropped)"""
    ).fetchone()
    return bool(row and row[0])


def _sums_column(has_sums: bool) -> sql.Composable:
    return sql.SQL("sums" if has_sums else "NULL::jsonb")


def _decision(row: Sequence[Any]) -> LoggedDecision:
    q, b, e, p, o, r, t, sums = row
    return LoggedDecision(str(q), int(b), int(e), tuple(p), o, int(r), t, sums)


def read_decisions_of(
    dsn: str, pipeline: str, batches: Iterable[int], has_sums: bool = True
) -> list[LoggedDecision]:
    """The decisions of these batch ids (any query), read after the sinks were.

    A participant's marker becomes visible only after its decision is durable, so a marker
    above the decisions the pass read is either of a batch decided meanwhile (this read finds
    its decision) or of a batch with no decision at all. ``has_sums``: ``eo.decisions`` has the
    ``sums`` column (``ControlEvidence.has_sums``, read once per pass).
    """
    wanted = sorted(set(batches))
    if not wanted:
        return []
    with reading(dsn) as conn:
        query = sql.SQL(
            """SELECT query_id, batch_id, epoch, participants, source_offsets, rows_written,
                      decided_at, {sums}
               FROM eo.decisions WHERE pipeline = %s AND batch_id = ANY(%s)"""
        ).format(sums=_sums_column(has_sums))
        rows = conn.execute(query, (pipeline, wanted)).fetchall()
    return [_decision(row) for row in rows]


def read_sink(
    dsn: str,
    pipeline: str,
    sink: str,
    positions: Mapping[str, int],
    *,
    table: str | None = None,
    batch_column: str | None = None,
    sum_columns: Sequence[str] = (),
    whole_table: bool = True,
) -> SinkEvidence:
    """Markers, prepared transactions and (when ``table``) the table's count and the sums of
    ``sum_columns`` (whole table unless ``whole_table`` is False, and per batch with
    ``batch_column``), in one snapshot.

    Markers and batch-column rows are read above the lowest position of any query (markers
    carry no query id column, only the gid); the caller keeps each query's own.
    """
    token = sink_token(sink)
    floor = min(positions.values(), default=-1)
    with reading(dsn) as conn:
        row = conn.execute(
            "SELECT to_regclass('eo.markers') IS NOT NULL, clock_timestamp()"
        ).fetchone()
        assert row is not None
        evidence = SinkEvidence(sink, bool(row[0]), {}, now=row[1])
        if evidence.has_markers:
            horizon_prefix = PRUNED_PREFIX + pipeline_token(pipeline) + ":"
            for gid, batch in conn.execute(
                "SELECT gid, batch_id FROM eo.markers WHERE starts_with(gid, %s)",
                (horizon_prefix,),
            ):
                evidence.horizons[str(gid)[len(horizon_prefix) :]] = int(batch)
            for gid, batch, rows in conn.execute(
                """SELECT gid, batch_id, rows_written FROM eo.markers
                   WHERE pipeline = %s AND batch_id > %s AND starts_with(gid, %s)""",
                (pipeline, floor, pipeline_prefix(pipeline)),
            ):
                parsed = Gid.parse(gid)
                if parsed is not None and parsed.sink == token:
                    evidence.markers[gid] = Marker(gid, parsed, int(batch), int(rows))
        for gid, prepared in conn.execute(
            """SELECT gid, prepared FROM pg_prepared_xacts
               WHERE database = current_database() AND starts_with(gid, %s)""",
            (pipeline_prefix(pipeline),),
        ):
            parsed = Gid.parse(gid)
            if parsed is not None and parsed.sink == token:
                evidence.prepared[gid] = Prepared(gid, parsed, prepared)
        if table is not None:
            ident = table_identifier(table)
            _read_table(conn, evidence, ident, floor, batch_column, sum_columns, whole_table)
    return evidence


def _read_table(
    conn: psycopg.Connection[Any],
    evidence: SinkEvidence,
    ident: sql.Identifier,
    floor: int,
    batch_column: str | None,
    sum_columns: Sequence[str],
    whole_table: bool,
) -> None:
    """count(*) and the sums of the table (when ``whole_table``), and per batch above
    ``floor``: one scan each (the per-batch one can use an index on the batch column)."""
    summed: list[str] = []
    if sum_columns:
        described = conn.execute(sql.SQL("SELECT * FROM {} LIMIT 0").format(ident)).description
        present = {d.name for d in described or ()}
        summed = [c for c in sum_columns if c in present]
        evidence.missing_sum_columns = tuple(c for c in sum_columns if c not in present)
    # sum() of an integer or numeric column is exact; as text it reaches Python as written.
    sums = sql.SQL("").join(sql.SQL(", sum({})::text").format(sql.Identifier(c)) for c in summed)
    if whole_table:
        counted = conn.execute(
            sql.SQL("SELECT count(*){s} FROM {t}").format(s=sums, t=ident)
        ).fetchone()
        assert counted is not None
        evidence.table_rows = int(counted[0])
        if sum_columns:
            evidence.table_sums = dict(zip(summed, map(_decimal, counted[1:]), strict=True))
    if batch_column is not None:
        query = sql.SQL("SELECT {c}, count(*){s} FROM {t} WHERE {c} > %s GROUP BY {c}")
        for batch, rows, *batch_sums in conn.execute(
            query.format(c=sql.Identifier(batch_column), s=sums, t=ident), (floor,)
        ):
            if batch is not None:
                evidence.rows_by_batch[int(batch)] = int(rows)
                if summed:
                    evidence.sums_by_batch[int(batch)] = dict(
                        zip(summed, map(_decimal, batch_sums), strict=True)
                    )


def _decimal(text: str | None) -> Decimal:
    """A sum read as text; NULL (no rows, or only NULLs) is 0."""
    return Decimal(0) if text is None else Decimal(text)


def table_identifier(table: str) -> sql.Identifier:
    """``schema.table`` as a quoted identifier (a bare name is taken as written)."""
    schema, dot, name = table.partition(".")
    return sql.Identifier(schema, name) if dot else sql.Identifier(table)
