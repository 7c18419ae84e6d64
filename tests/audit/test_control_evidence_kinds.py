"""The audit reads the decision log of either control database kind alike
(``auditor.read_control`` dispatches on the DSN's kind)."""

from __future__ import annotations

import pytest

from eo_jobs.audit.auditor import read_control, read_decisions_of
from eo_jobs.protocol.databases import control_store, kind
from eo_jobs.protocol.gid import query_token

PIPELINE = "ns/evidence"
QUERY = "9f1c2a4e-0000-4000-8000-000000000001"


@pytest.fixture(params=("postgresql", "mariadb"))
def dsn(request: pytest.FixtureRequest, pg_dsn: str) -> str:
    if request.param == "postgresql":
        return pg_dsn
    return str(request.getfixturevalue("mariadb_db").dsn)


def test_the_decisions_after_a_position_are_read_with_their_anchor_and_sums(dsn: str) -> None:
    if kind(dsn) == "mysql":  # a fresh database: no control tables yet, nothing to audit
        assert not read_control(dsn, PIPELINE, {}, None).has_tables
    control = control_store(dsn)
    control.ensure_schema()
    control.raise_fence(PIPELINE, 4)
    for batch in range(5):
        control.decide(
            pipeline=PIPELINE,
            query_id=QUERY,
            batch_id=batch,
            epoch=4,
            participants=[f"g{batch}a", f"g{batch}b"],
            source_offsets={"f": batch},
            rows_written=batch,
            prepare_ms=0.0,
            sums={"orders": {"amount": f"{batch}.50"}},
        )
    control.close()

    evidence = read_control(dsn, PIPELINE, {query_token(QUERY): 2}, 1)
    assert evidence.has_tables and evidence.fence == 4 and evidence.now is not None
    assert evidence.last_batch == {QUERY: 4}
    assert [d.batch_id for d in evidence.decisions] == [2, 3]  # the anchor, then one more
    anchor = evidence.decisions[0]
    assert anchor.participants == ("g2a", "g2b") and anchor.source_offsets == {"f": 2}
    assert anchor.sums == {"orders": {"amount": "2.50"}} and anchor.decided_at.tzinfo
    everything = read_control(dsn, PIPELINE, {}, None)
    assert [d.batch_id for d in everything.decisions] == [0, 1, 2, 3, 4]
    late = read_decisions_of(dsn, PIPELINE, [4, 1, 9])
    assert sorted(d.batch_id for d in late) == [1, 4]
    assert read_decisions_of(dsn, PIPELINE, []) == []
