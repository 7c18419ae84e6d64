"""``sinks[].mysql``: one kind per sink, the control database of either kind, and where each
database's dead-letter table is."""

from __future__ import annotations

from typing import Any

from eo_jobs.spec import parse_pipeline
from tests.support.pipelines import document as _doc
from tests.support.pipelines import problems as _problems

PG = {"dsn": {"env": "PG"}, "table": "public.ledger"}
MY = {"dsn": {"env": "MY"}, "table": "shop.orders"}
CONTROL = {"dsn": {"env": "CONTROL"}}


def _mixed(first: dict[str, Any], second: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return _doc(sinks=[{"name": "a", **first}, {"name": "b", **second}], **spec)


def test_a_sink_names_exactly_one_database_kind() -> None:
    both = _doc(sinks=[{"name": "a", "postgres": PG, "mysql": MY}])
    neither = _doc(sinks=[{"name": "a"}])
    for doc in (both, neither):
        problems = _problems(doc)
        assert any("exactly one of postgres" in text for text in problems.values()), problems


def test_a_mysql_first_sink_may_hold_the_decisions_or_name_a_control_database() -> None:
    alone = parse_pipeline(_mixed({"mysql": MY}, {"postgres": PG})).spec
    assert alone.control is None  # the first sink's database, MySQL, decides
    assert parse_pipeline(_mixed({"mysql": MY}, {"postgres": PG}, control=CONTROL)).spec.control


def test_mysql_upsert_needs_key_columns_and_accumulate_is_not_a_mysql_mode() -> None:
    upsert = _doc(sinks=[{"name": "a", "mysql": {**MY, "mode": "upsert"}}], control=CONTROL)
    assert "keyColumns" in _problems(upsert)["spec.sinks[0].mysql.keyColumns"]
    accumulate = _doc(sinks=[{"name": "a", "mysql": {**MY, "mode": "accumulate"}}], control=CONTROL)
    assert "spec.sinks[0].mysql.mode" in _problems(accumulate)


def test_each_database_kind_gets_its_own_name_of_the_dead_letter_table() -> None:
    # First sink PostgreSQL: its table + _dead_letter; a MySQL sink's in its own database.
    pg_first = parse_pipeline(_mixed({"postgres": PG}, {"mysql": MY})).spec
    assert pg_first.dead_letter_table_in("postgres") == "public.ledger_dead_letter"
    assert pg_first.dead_letter_table_in("mysql") == "ledger_dead_letter"
    # First sink MySQL: a PostgreSQL database keeps the default in schema public.
    my_first = parse_pipeline(_mixed({"mysql": MY}, {"postgres": PG}, control=CONTROL)).spec
    assert my_first.dead_letter_table_in("mysql") == "orders_dead_letter"
    assert my_first.dead_letter_table_in("postgres") == "public.orders_dead_letter"
    # Named in the spec: as named in PostgreSQL, its last part in MySQL.
    named = parse_pipeline(
        _mixed({"mysql": MY}, {"postgres": PG}, control=CONTROL, deadLetter={"table": "ops.dl"})
    ).spec
    assert named.dead_letter_table_in("postgres") == "ops.dl"
    assert named.dead_letter_table_in("mysql") == "dl"
