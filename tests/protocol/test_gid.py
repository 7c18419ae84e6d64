"""Gids: deterministic, parseable, under PostgreSQL's 200-byte limit, distinct for long names."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from eo_jobs.protocol.gid import MAX_GID_BYTES, Gid, pipeline_prefix

names = st.text(min_size=1, max_size=300)


@given(
    pipeline=names,
    sink=names,
    query=names,
    epoch=st.integers(1, 2**62),
    batch=st.integers(0, 2**62),
    task=st.integers(0, 10**6),
    attempt=st.integers(0, 10**6),
)
def test_every_gid_fits_parses_back_and_carries_the_pipeline_prefix(
    pipeline: str, sink: str, query: str, epoch: int, batch: int, task: int, attempt: int
) -> None:
    gid = Gid.build(
        pipeline=pipeline,
        query_id=query,
        sink=sink,
        epoch=epoch,
        batch=batch,
        task=task,
        attempt=attempt,
    )
    text = str(gid)
    assert len(text.encode()) <= MAX_GID_BYTES
    assert Gid.parse(text) == gid
    assert text.startswith(pipeline_prefix(pipeline))


def test_the_same_participant_always_gets_the_same_gid() -> None:
    kwargs = {
        "pipeline": "payments/ledger",
        "query_id": "q",
        "sink": "pg",
        "epoch": 3,
        "batch": 7,
        "task": 1,
        "attempt": 0,
    }
    assert str(Gid.build(**kwargs)) == str(Gid.build(**kwargs))  # type: ignore[arg-type]


def test_long_names_sharing_a_prefix_get_different_gids() -> None:
    a = "ns/" + "x" * 250 + "a"
    b = "ns/" + "x" * 250 + "b"
    assert pipeline_prefix(a) != pipeline_prefix(b)


def test_foreign_prepared_transactions_are_not_parsed_as_ours() -> None:
    assert Gid.parse("_pg3_12345") is None
    assert Gid.parse("eo1:a:b:c:notanumber:1:2:3") is None
