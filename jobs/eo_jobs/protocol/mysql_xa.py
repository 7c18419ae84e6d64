"""Prepared XA branches of one MySQL/MariaDB database: list, commit, roll back, verified.

The MySQL kind of ``participants.ParticipantStore`` (docs/mysql.md has what it rests on, as
checked against MariaDB 10.11). A participant is an XA branch whose xid is a pure function of
its eo gid and of the sink database's name (``xid_of``), and the gid is recovered from the xid
alone (``gid_of``): a prepared branch's marker row is invisible to other sessions until commit,
so ``XA RECOVER`` is all recovery can read.

XID encoding (formatID ``FORMAT_ID``, "eo01"; gtrid and bqual at most 64 bytes each):

* gtrid (the batch, shared by its branches) = pipeline token + query token + batch:
  ``<pipeline stem> ":" <4 bytes pipeline hash> <8 bytes query token> <8 bytes batch>``;
* bqual (the branch) = sink token + epoch + task + attempt + database tag:
  ``<sink stem> ":" <4 bytes sink hash> <8 bytes epoch> <8 bytes task> <8 bytes attempt>
  <4 bytes of SHA-256 of the database name>``.

A token of ``gid`` is ``<readable stem>-<8 hex of a hash>`` (stem at most 40 characters for a
pipeline, 24 for a sink, ``[a-z0-9-]``, possibly empty); its hex is packed into 4 bytes and the
stem kept readable, numbers are unsigned big-endian. So gtrid is at most 61 bytes, bqual at most
61, and the tails have fixed lengths, which makes decoding unambiguous. The database tag makes
``in_doubt`` list this database's branches only, as PostgreSQL's ``pg_prepared_xacts`` filtered
on ``current_database()`` does, although ``XA RECOVER`` lists the whole server's.

``XAER_NOTA`` (1397) on ``XA COMMIT``/``XA ROLLBACK`` means any of: never prepared, already
committed, already rolled back, or prepared but still attached to a live connection (MariaDB
binds a prepared branch to its connection until that connection ends). The last one is told
apart by ``XA RECOVER``: a branch it still lists is prepared, so the finisher waits for the
connection to end (eo's writers close right after ``XA PREPARE``, but the server may not have
processed the close yet; a frozen one is cut by the server after the writer session's
``wait_timeout``; or another session is finishing the branch) and retries, up to
``BUSY_RETRY_SECONDS``, then raises ``BranchAttachedError``: the branch stays prepared, and
nothing is concluded from 1397. A branch not listed is decided by its marker row, exactly as
for PostgreSQL.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import pymysql
import pymysql.cursors

from eo_jobs.protocol.gid import PREFIX, Gid, pipeline_token
from eo_jobs.protocol.participants import (
    BUSY_RETRY_SECONDS,
    MARKER_RETENTION_SECONDS,
    PRUNED_PREFIX,
    DatabaseKey,
    InDoubt,
    ParticipantStore,
    horizon_gid,
)
from eo_jobs.protocol.retention import prune_below

T = TypeVar("T")

FORMAT_ID = 0x656F3031
"""eo's XA formatID ("eo01"): ``in_doubt`` never looks at another software's branches."""
MAX_XID_PART = 64
XAER_NOTA = 1397
XAER_RMFAIL = 1399
XA_RBROLLBACK = 1402
LOST_CONNECTION = frozenset({2006, 2013, 2003, 2055})
"""Client errors of a connection that died (server gone, lost during query, can't connect)."""
MARKERS_TABLE = "eo_markers"
"""The marker table, in the sink's database (MySQL has no schemas inside a database)."""
MARKERS_DDL = f"""CREATE TABLE IF NOT EXISTS `{MARKERS_TABLE}` (
    gid VARCHAR(200) CHARACTER SET ascii NOT NULL PRIMARY KEY,
    pipeline VARCHAR(512) NOT NULL,
    batch_id BIGINT NOT NULL,
    rows_written BIGINT NOT NULL,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    KEY eo_markers_pipeline_batch (pipeline, batch_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"""
IDENTITY_DDL = """CREATE TABLE IF NOT EXISTS `eo_database_identity` (
    singleton TINYINT NOT NULL PRIMARY KEY DEFAULT 1 CHECK (singleton = 1),
    id CHAR(36) CHARACTER SET ascii NOT NULL
) ENGINE=InnoDB"""
"""This database's stable random identity (``registry``; MySQL has no schema ``eo``)."""
DECIDED_BY_DDL = """CREATE TABLE IF NOT EXISTS `eo_decided_by` (
    pipeline VARCHAR(512) NOT NULL PRIMARY KEY,
    control_database CHAR(36) CHARACTER SET ascii NOT NULL,
    control_label VARCHAR(512) NOT NULL,
    recorded_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"""
"""Which control database decides each pipeline with participants here (``registry``)."""
MARKER_SQL = (
    "INSERT INTO `eo_markers` (gid, pipeline, batch_id, rows_written) VALUES (%s, %s, %s, %s)"
)
"""The participant's marker, inserted inside its branch (an empty branch is not durable)."""
ROLLBACK_SEGMENTS = 128
"""InnoDB's rollback segments (fixed on MariaDB 10.11: ``innodb_undo_logs`` is gone)."""
REOPEN_SECONDS = 60.0
CONNECT_TIMEOUT = 10

_TOKEN = re.compile(r"^(?:([a-z0-9-]*[a-z0-9])-)?([0-9a-f]{8})$")
_QUERY = re.compile(r"^[0-9a-f]{16}$")


class BranchAttachedError(RuntimeError):
    """A prepared branch stayed attached to a live connection (``XAER_NOTA`` while
    ``XA RECOVER`` lists it): its writer has not disconnected. Nothing was finished."""


@dataclass(frozen=True)
class Xid:
    """An XA transaction id."""

    gtrid: bytes
    bqual: bytes
    format_id: int = FORMAT_ID

    def sql(self) -> str:
        """The xid as XA statements take it: hex literals, so any bytes are safe."""
        return f"X'{self.gtrid.hex()}',X'{self.bqual.hex()}',{int(self.format_id)}"


def database_tag(database: str) -> bytes:
    """4 bytes naming the sink database inside a bqual."""
    return hashlib.sha256(database.encode()).digest()[:4]


def _pack_token(token: str) -> bytes:
    found = _TOKEN.match(token)
    if found is None:
        raise ValueError(f"not an eo gid token: {token!r}")
    return (found.group(1) or "").encode() + b":" + bytes.fromhex(found.group(2))


def _unpack_token(raw: bytes) -> str | None:
    stem, colon, digest = raw[:-4], raw[-5:-4], raw[-4:]
    if colon != b":":
        return None
    text = stem[:-1].decode("ascii", errors="replace")
    token = f"{text}-{digest.hex()}" if text else digest.hex()
    return token if _TOKEN.match(token) else None


def _u64(value: int) -> bytes:
    if not 0 <= value < 2**64:
        raise ValueError(f"{value} does not fit an XA id's 8 bytes")
    return value.to_bytes(8, "big")


def xid_of(gid: str | Gid, database: str) -> Xid:
    """The xid of participant ``gid`` in ``database`` (see the module's docstring)."""
    parsed = Gid.parse(gid) if isinstance(gid, str) else gid
    if parsed is None:
        raise ValueError(f"not an eo gid: {gid}")
    if not _QUERY.match(parsed.query):
        raise ValueError(f"not an eo query token: {parsed.query!r}")
    gtrid = _pack_token(parsed.pipeline) + bytes.fromhex(parsed.query) + _u64(parsed.batch)
    bqual = (
        _pack_token(parsed.sink)
        + _u64(parsed.epoch)
        + _u64(parsed.task)
        + _u64(parsed.attempt)
        + database_tag(database)
    )
    if len(gtrid) > MAX_XID_PART or len(bqual) > MAX_XID_PART:
        raise ValueError(f"xid of {gid} longer than {MAX_XID_PART} bytes")
    return Xid(gtrid, bqual)


def gid_of(xid: Xid, database: str) -> str | None:
    """The gid of an eo branch of ``database``; None for anything else (another formatID,
    another database's branch, another software's bytes)."""
    gtrid, bqual = xid.gtrid, xid.bqual
    if xid.format_id != FORMAT_ID or len(gtrid) < 21 or len(bqual) < 33:
        return None
    if bqual[-4:] != database_tag(database):
        return None
    pipeline = _unpack_token(gtrid[:-16])
    sink = _unpack_token(bqual[:-28])
    if pipeline is None or sink is None:
        return None
    query = gtrid[-16:-8].hex()
    batch = int.from_bytes(gtrid[-8:], "big")
    epoch, task, attempt = (int.from_bytes(bqual[i : i + 8], "big") for i in (-28, -20, -12))
    return f"{PREFIX}:{pipeline}:{query}:{sink}:{epoch}:{batch}:{task}:{attempt}"


@dataclass(frozen=True)
class MySqlDsn:
    """``mysql://user:password@host:port/database`` (``mariadb://`` too), parsed."""

    host: str
    port: int
    user: str
    password: str
    database: str

    @classmethod
    def parse(cls, dsn: str) -> MySqlDsn:
        """Parse a DSN; the database is required (it holds the marker table)."""
        parts = urlsplit(dsn)
        if parts.scheme not in ("mysql", "mariadb"):
            raise ValueError("a MySQL DSN starts with mysql:// or mariadb://")
        database = unquote(parts.path.lstrip("/"))
        if not database or "/" in database:
            raise ValueError("a MySQL DSN must name one database: mysql://user@host:port/NAME")
        return cls(
            host=parts.hostname or "localhost",
            port=parts.port or 3306,
            user=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
            database=database,
        )

    def label(self) -> str:
        """``host:port/database`` (no user, no password)."""
        return f"{self.host}:{self.port}/{self.database}"


def connect(
    dsn: str | MySqlDsn, *, autocommit: bool = True, connect_timeout: int = CONNECT_TIMEOUT
) -> pymysql.Connection[pymysql.cursors.Cursor]:
    """A new connection to the DSN's database (utf8mb4, TCP)."""
    given = MySqlDsn.parse(dsn) if isinstance(dsn, str) else dsn
    return pymysql.connect(
        host=given.host,
        port=given.port,
        user=given.user,
        password=given.password,
        database=given.database,
        charset="utf8mb4",
        autocommit=autocommit,
        connect_timeout=connect_timeout,
    )


def connect_patiently(
    dsn: str | MySqlDsn, wait_seconds: float, *, autocommit: bool = True
) -> pymysql.Connection[pymysql.cursors.Cursor]:
    """Connect, retrying a refused connect with backoff for up to ``wait_seconds``."""
    deadline = time.monotonic() + wait_seconds
    pause = 0.2
    while True:
        try:
            return connect(dsn, autocommit=autocommit)
        except pymysql.OperationalError as exc:
            if exc.args[0] not in LOST_CONNECTION or time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 5.0)


def error_code(exc: BaseException) -> int | None:
    """The server's (or client's) MySQL error number of ``exc``."""
    if isinstance(exc, pymysql.MySQLError) and exc.args and isinstance(exc.args[0], int):
        return exc.args[0]
    return None


Row = tuple[Any, ...]


class MySqlPreparedTransactions(ParticipantStore):
    """Prepared eo branches of one MySQL/MariaDB sink database, on one autocommit connection
    (reopened when it died, patiently once it was seen)."""

    def __init__(self, dsn: str, *, busy_retry_seconds: float = BUSY_RETRY_SECONDS) -> None:
        self.dsn = dsn
        self.target = MySqlDsn.parse(dsn)
        self.busy_retry_seconds = busy_retry_seconds
        self._conn: pymysql.Connection[pymysql.cursors.Cursor] | None = None
        self._seen = False
        self._first_listed: dict[str, datetime] = {}

    # -- connection -------------------------------------------------------------------------

    def connection(self) -> pymysql.Connection[pymysql.cursors.Cursor]:
        """The open connection; a closed one is replaced."""
        if self._conn is None or not self._conn.open:
            wait = REOPEN_SECONDS if self._seen else 0.0
            self._conn = connect_patiently(self.target, wait)
            self._seen = True
        return self._conn

    def run(self, work: Callable[[pymysql.Connection[pymysql.cursors.Cursor]], T]) -> T:
        """Run idempotent ``work``; once more on a new connection if the old one died."""
        try:
            return work(self.connection())
        except pymysql.OperationalError as exc:
            if error_code(exc) not in LOST_CONNECTION:
                raise
            self.close()
            return work(self.connection())

    def query(self, statement: str, args: Any = None) -> list[Row]:
        """Rows of one statement (idempotent: retried on a new connection)."""

        def work(conn: pymysql.Connection[pymysql.cursors.Cursor]) -> list[Row]:
            with conn.cursor() as cur:
                cur.execute(statement, args)
                return list(cur.fetchall())

        return self.run(work)

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._conn is not None:
            with contextlib.suppress(pymysql.Error):
                self._conn.close()
            self._conn = None

    # -- ParticipantStore -------------------------------------------------------------------

    def xid(self, gid: str) -> Xid:
        """The xid of ``gid`` in this store's database."""
        return xid_of(gid, self.target.database)

    def ensure_schema(self) -> None:
        """Create ``eo_markers``, ``eo_database_identity`` and ``eo_decided_by`` if missing
        (DDL: never inside an XA branch)."""
        for ddl in (MARKERS_DDL, IDENTITY_DDL, DECIDED_BY_DDL):
            self.query(ddl)

    def identity(self) -> str:
        """``eo_database_identity``'s id, created on first use (``registry``)."""
        self.query("INSERT IGNORE INTO `eo_database_identity` (id) VALUES (UUID())")
        return str(self.query("SELECT id FROM `eo_database_identity`")[0][0])

    def decided_by(self, pipeline: str, control_id: str, control_label: str) -> tuple[str, str]:
        """``eo_decided_by``'s row of ``pipeline``, recorded when absent (``registry``)."""
        self.query(
            "INSERT IGNORE INTO `eo_decided_by` (pipeline, control_database, control_label)"
            " VALUES (%s, %s, %s)",
            (pipeline, control_id, control_label),
        )
        row = self.query(
            "SELECT control_database, control_label FROM `eo_decided_by` WHERE pipeline = %s",
            (pipeline,),
        )[0]
        return str(row[0]), str(row[1])

    def recovered(self) -> list[Xid]:
        """``XA RECOVER``: every prepared branch of the whole server."""
        found = []
        for format_id, gtrid_length, bqual_length, data in self.query("XA RECOVER"):
            raw = bytes(data) if isinstance(data, bytes | bytearray) else str(data).encode()
            gtrid, bqual = raw[:gtrid_length], raw[gtrid_length : gtrid_length + bqual_length]
            found.append(Xid(gtrid, bqual, int(format_id)))
        return found

    def in_doubt(self, prefix: str) -> list[InDoubt]:
        """eo's prepared branches of this database whose gid starts with ``prefix``."""
        now = datetime.now(UTC)
        found: list[InDoubt] = []
        for xid in self.recovered():
            gid = gid_of(xid, self.target.database)
            parsed = None if gid is None else Gid.parse(gid)
            if gid is None or parsed is None or not gid.startswith(prefix):
                continue
            first = self._first_listed.setdefault(gid, now)
            found.append(InDoubt(gid, parsed, first, ""))
        return found

    def server_limits(self) -> tuple[int, int]:
        """(prepared branches on the server, InnoDB's bound on concurrent read-write
        transactions): ``innodb_page_size / 16`` undo slots per rollback segment, 128 segments,
        halved because a branch that inserts and updates holds two slots. A prepared branch
        keeps its slots until it is finished."""
        (page,) = self.query("SELECT @@innodb_page_size")[0]
        return len(self.recovered()), int(page) // 16 * ROLLBACK_SEGMENTS // 2

    def database_key(self) -> DatabaseKey:
        """("mysql", host:port as the server names itself, database). XA is server-wide, but
        ``in_doubt`` filters on the database tag, so the database is part of the key."""
        host, port, database = self.query("SELECT @@hostname, @@port, DATABASE()")[0]
        return ("mysql", f"{host}:{port}", str(database))

    def label(self) -> str:
        """``host:port/database`` of the DSN."""
        return self.target.label()

    def finish(self, verb: str, gid: str) -> bool:
        """``XA COMMIT``/``XA ROLLBACK`` by xid; True if it acted, False if the branch is not
        prepared (1397 and not listed by ``XA RECOVER``, or 1402: rolled back by the server).
        1397 for a branch still listed is a live connection holding it: waited for, then
        ``BranchAttachedError``."""
        if verb not in ("COMMIT", "ROLLBACK"):
            raise ValueError(f"unknown verb {verb!r}")
        xid = self.xid(gid)
        statement = f"XA {verb} {xid.sql()}"
        deadline = time.monotonic() + self.busy_retry_seconds
        delay = 0.05
        while True:
            try:
                self.query(statement)
                return True
            except pymysql.MySQLError as exc:
                code = error_code(exc)
                if code == XA_RBROLLBACK:
                    return False
                if code != XAER_NOTA:
                    raise
            if xid not in self.recovered():
                return False
            if time.monotonic() > deadline:
                raise BranchAttachedError(
                    f"participant {gid} is prepared but still attached to a live connection "
                    f"in {self.label()} (its writer did not disconnect after XA PREPARE); it is "
                    "left prepared: finish it again once that connection has ended"
                )
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def marker_visible(self, gid: str) -> bool:
        """Whether ``gid``'s marker row is committed in this database."""
        return bool(self.query("SELECT 1 FROM `eo_markers` WHERE gid = %s", (gid,)))

    def pruned_up_to(self, pipeline: str, query: str) -> int | None:
        """The prune horizon of this pipeline's query (tokens), if any."""
        rows = self.query(
            "SELECT batch_id FROM `eo_markers` WHERE gid = %s",
            (horizon_gid(pipeline, query),),
        )
        return None if not rows else int(rows[0][0])

    def prune_markers(self, pipeline: str, below_batch: int, audited: int | None = None) -> int:
        """Delete markers both ``MARKER_RETENTION_BATCHES`` behind (within the audit's bounds,
        ``retention.prune_below``) and ``MARKER_RETENTION_SECONDS`` old, in one transaction
        that also raises the prune horizon of each query it pruned."""
        token = pipeline_token(pipeline)
        where = (
            "FROM `eo_markers` WHERE pipeline = %s AND batch_id < %s AND gid NOT LIKE %s "
            "AND created_at < NOW(6) - INTERVAL %s MICROSECOND"
        )
        args = (
            pipeline,
            prune_below(below_batch, audited),
            PRUNED_PREFIX + "%",
            int(MARKER_RETENTION_SECONDS * 1_000_000),
        )

        def prune(conn: pymysql.Connection[pymysql.cursors.Cursor]) -> int:
            conn.begin()
            try:
                with conn.cursor() as cur:
                    cur.execute(f"SELECT gid, batch_id {where} FOR UPDATE", args)
                    highest: dict[str, int] = {}
                    rows = list(cur.fetchall())
                    for gid, batch in rows:
                        query = str(gid).split(":")[2]
                        highest[query] = max(highest.get(query, -1), int(batch))
                    cur.execute(f"DELETE {where}", args)
                    for query, batch in highest.items():
                        cur.execute(
                            "INSERT INTO `eo_markers` (gid, pipeline, batch_id, "
                            "rows_written) VALUES (%s, %s, %s, 0) ON DUPLICATE KEY UPDATE "
                            "batch_id = GREATEST(batch_id, VALUES(batch_id))",
                            (horizon_gid(token, query), pipeline, batch),
                        )
                conn.commit()
            except BaseException:
                conn.rollback()
                raise
            return len(rows)

        return self.run(prune)
