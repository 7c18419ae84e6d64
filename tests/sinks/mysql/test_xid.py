"""The xid of an eo participant on MySQL/MariaDB: a pure function of gid and database, within
the server's 64-byte limits, decoded back to the very gid from the xid alone."""

from __future__ import annotations

import pytest

from eo_jobs.protocol.databases import kind, participant_store
from eo_jobs.protocol.gid import Gid
from eo_jobs.protocol.mysql_xa import (
    FORMAT_ID,
    MAX_XID_PART,
    MySqlDsn,
    MySqlPreparedTransactions,
    Xid,
    gid_of,
    xid_of,
)
from eo_jobs.protocol.xa import PreparedTransactions
from eo_jobs.sinks.mysql.writer import quote_identifier, table_identifier

LONG = "n" * 63 + "/" + "p" * 253


def _gid(**given: object) -> Gid:
    fields: dict[str, object] = {
        "pipeline": "default/ledger",
        "query_id": "3f2b0c9e-8d1a-4c6b-9e2f-0a1b2c3d4e5f",
        "sink": "ledger",
        "epoch": 1,
        "batch": 0,
        "task": 0,
        "attempt": 0,
    }
    fields.update(given)
    return Gid.build(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "gid",
    [
        _gid(),
        _gid(pipeline=LONG, sink="s" * 300, query_id="not a uuid"),
        _gid(pipeline="///", sink="---"),  # no readable stem: the token is its hash only
        _gid(epoch=2**63, batch=2**64 - 1, task=2**31, attempt=7),
    ],
)
def test_a_gid_maps_to_an_xid_within_64_bytes_and_back(gid: Gid) -> None:
    xid = xid_of(str(gid), "sales")
    assert len(xid.gtrid) <= MAX_XID_PART and len(xid.bqual) <= MAX_XID_PART
    assert xid.format_id == FORMAT_ID
    assert gid_of(xid, "sales") == str(gid)
    assert xid_of(str(gid), "sales") == xid  # deterministic: a replay finds it again


def test_branches_of_one_batch_share_the_gtrid_and_differ_in_bqual() -> None:
    a = xid_of(_gid(task=0), "db")
    b = xid_of(_gid(task=1), "db")
    c = xid_of(_gid(task=0, attempt=1), "db")
    d = xid_of(_gid(task=0, epoch=2), "db")
    assert a.gtrid == b.gtrid == c.gtrid == d.gtrid
    assert len({a.bqual, b.bqual, c.bqual, d.bqual}) == 4
    assert xid_of(_gid(batch=1), "db").gtrid != a.gtrid


def test_a_branch_of_another_database_or_another_software_is_not_ours() -> None:
    xid = xid_of(_gid(), "sales")
    assert gid_of(xid, "billing") is None
    assert gid_of(Xid(xid.gtrid, xid.bqual, 1), "sales") is None
    assert gid_of(Xid(b"eo1:anything", b"x", FORMAT_ID), "sales") is None
    assert gid_of(Xid(b"\xff" * 64, b"\x00" * 64, FORMAT_ID), "sales") is None


def test_a_number_beyond_eight_bytes_is_refused_before_it_reaches_sql() -> None:
    with pytest.raises(ValueError, match="8 bytes"):
        xid_of(_gid(batch=2**64), "db")
    with pytest.raises(ValueError, match="not an eo gid"):
        xid_of("pruned:x:y", "db")


@pytest.mark.parametrize(
    ("dsn", "expected"),
    [
        ("postgresql://u@h/db", "postgresql"),
        ("postgres://h/db", "postgresql"),
        ("host=h dbname=db", "postgresql"),
        ("service=prod", "postgresql"),
        ("mysql://root@127.0.0.1:3306/sales", "mysql"),
        ("MariaDB://u:p@h/sales", "mysql"),
    ],
)
def test_the_dsn_scheme_picks_the_database_kind(dsn: str, expected: str) -> None:
    assert kind(dsn) == expected
    store = participant_store(dsn)
    assert isinstance(
        store, MySqlPreparedTransactions if expected == "mysql" else PreparedTransactions
    )


def test_an_unknown_scheme_or_a_mysql_dsn_without_a_database_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown database scheme"):
        kind("oracle://h/db")
    with pytest.raises(ValueError, match="one database"):
        MySqlDsn.parse("mysql://root@h:3306/")
    parsed = MySqlDsn.parse("mysql://a%40b:p%3Aw@h:3307/my%20db")
    assert (parsed.user, parsed.password, parsed.port, parsed.database) == (
        "a@b",
        "p:w",
        3307,
        "my db",
    )


def test_identifiers_are_backtick_quoted_and_impossible_ones_refused() -> None:
    assert quote_identifier("ledger") == "`ledger`"
    assert quote_identifier("a`b; DROP TABLE x") == "`a``b; DROP TABLE x`"
    assert table_identifier("sales.ledger") == "`sales`.`ledger`"
    for bad in ("", "x" * 65, "a\x00b", "trailing "):
        with pytest.raises(ValueError):
            quote_identifier(bad)
