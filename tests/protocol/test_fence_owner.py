"""The fence knows its owner: two writers of one pipeline key never run drivers side by side.

Two writers share a control database but not their bookkeeping when the same pipeline runs in
two clusters (a DR pair, blue/green), when an object is restored without its status, or when
someone runs ``eo run`` by hand. Epochs alone cannot keep them apart: each plans its own, and
both may plan the same one. The fence row names its owner; another owner is refused until the
fence is handed over, and takes it strictly above its epoch.
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from eo_jobs.protocol.control import (
    ControlStore,
    FenceTakenError,
    ForeignFenceOwnerError,
    SchemaUpgradeError,
)
from eo_jobs.protocol.coordinator import Coordinator
from eo_jobs.protocol.errors import FencedError, FenceRegressionError
from eo_jobs.protocol.xa import PreparedTransactions
from tests.protocol import harness

A, B = "uid-cluster-a", "uid-cluster-b"


def _driver(dsn: str, epoch: int, owner: str | None) -> Coordinator:
    return Coordinator(
        harness.PIPELINE, epoch, ControlStore(dsn), {harness.SINK: PreparedTransactions(dsn)}, owner
    )


def test_a_second_writer_cannot_start_a_driver_at_the_epoch_another_writer_runs(
    pg_dsn: str,
) -> None:
    harness.create_table(pg_dsn)
    first = _driver(pg_dsn, 1, A)
    first.startup()
    assert first.begin(harness.QUERY, 0, harness.offsets(0)) is None
    prepared = [harness.prepare_task(first, pg_dsn, 0, t, harness.batch_rows(0)) for t in (0, 1)]

    with pytest.raises(ForeignFenceOwnerError, match=f"owned by '{A}', not by '{B}'") as refused:
        _driver(pg_dsn, 1, B).startup()
    assert "eo release-fence" in str(refused.value) and "eo.dev/adopt-fence" in str(refused.value)
    assert isinstance(refused.value, FencedError)  # the driver exits 75

    # The first driver's participants were not rolled back by the refused one: it commits.
    first.commit(first.decide(harness.QUERY, 0, prepared, harness.offsets(0), 0.0))
    assert harness.audit(pg_dsn, range(1)).rows == sum(p.rows for p in prepared) > 0


def test_the_owner_raises_its_own_fence_again_at_the_same_epoch(pg_dsn: str) -> None:
    control = ControlStore(pg_dsn)
    control.ensure_schema()
    control.raise_fence(harness.PIPELINE, 3, A)
    change = control.raise_fence(harness.PIPELINE, 3, A)  # its driver's start-up
    assert (change.previous, change.current, change.previous_owner) == (3, 3, A)
    control.raise_fence(harness.PIPELINE, 4, A)
    fence = control.fence(harness.PIPELINE)
    assert fence is not None and (fence.epoch, fence.owner) == (4, A)


def test_a_claim_on_another_writers_fence_is_refused_at_any_epoch(pg_dsn: str) -> None:
    control = ControlStore(pg_dsn)
    control.ensure_schema()
    control.raise_fence(harness.PIPELINE, 1, A)
    for epoch in (1, 2, 50):
        with pytest.raises(ForeignFenceOwnerError):
            control.raise_fence(harness.PIPELINE, epoch, B)
    fence = control.fence(harness.PIPELINE)
    assert fence is not None and (fence.epoch, fence.owner) == (1, A)


def test_an_adoption_names_the_old_owner_and_goes_strictly_above_its_epoch(pg_dsn: str) -> None:
    control = ControlStore(pg_dsn)
    control.ensure_schema()
    control.raise_fence(harness.PIPELINE, 4, A)
    with pytest.raises(ForeignFenceOwnerError):  # the hand-over names someone else
        control.raise_fence(harness.PIPELINE, 5, B, adopt_from="uid-someone-else")
    with pytest.raises(FenceTakenError, match="above 4"):
        control.raise_fence(harness.PIPELINE, 4, B, adopt_from=A)
    change = control.raise_fence(harness.PIPELINE, 5, B, adopt_from=A)
    assert (change.previous, change.previous_owner) == (4, A)
    fence = control.fence(harness.PIPELINE)
    assert fence is not None and (fence.epoch, fence.owner) == (5, B)
    with pytest.raises(ForeignFenceOwnerError):  # and the old owner is now the foreign one
        control.raise_fence(harness.PIPELINE, 6, A)


def test_a_released_fence_is_taken_by_a_new_owner_only_above_its_epoch(pg_dsn: str) -> None:
    control = ControlStore(pg_dsn)
    control.ensure_schema()
    control.raise_fence(harness.PIPELINE, 7, A)
    assert not control.release_fence(harness.PIPELINE, B)  # not B's to release
    assert control.release_fence(harness.PIPELINE, A)
    fence = control.fence(harness.PIPELINE)
    assert fence is not None and (fence.epoch, fence.owner) == (7, None)
    with pytest.raises(FenceRegressionError, match="above 7"):
        control.raise_fence(harness.PIPELINE, 7, B)
    control.raise_fence(harness.PIPELINE, 8, B)
    fence = control.fence(harness.PIPELINE)
    assert fence is not None and (fence.epoch, fence.owner) == (8, B)


def test_a_plain_fence_raise_stops_the_owners_drivers_and_keeps_its_owner(pg_dsn: str) -> None:
    # `eo recover --epoch N` by hand, or a deletion: fencing only stops drivers, so anyone may.
    control = ControlStore(pg_dsn)
    control.ensure_schema()
    control.raise_fence(harness.PIPELINE, 2, A)
    control.raise_fence(harness.PIPELINE, 9)
    fence = control.fence(harness.PIPELINE)
    assert fence is not None and (fence.epoch, fence.owner) == (9, A)


def test_a_driver_without_an_owner_runs_only_under_a_fence_nobody_owns(pg_dsn: str) -> None:
    harness.create_table(pg_dsn)
    _driver(pg_dsn, 1, None).startup()  # a manual `eo run` on a fresh database
    owned = _driver(pg_dsn, 2, A)
    owned.startup()  # an operator takes the unowned fence above it
    with pytest.raises(ForeignFenceOwnerError, match="not by None"):
        _driver(pg_dsn, 3, None).startup()
    assert ControlStore(pg_dsn).fence_epoch(harness.PIPELINE) == 2  # refused before raising


def test_a_driver_resolves_nothing_under_a_fence_whose_owner_is_not_its_own(pg_dsn: str) -> None:
    # Defence in depth: however the row came to name another owner at this driver's epoch
    # (an older eo's raise, a hand edit), begin() must not roll back that writer's work.
    harness.create_table(pg_dsn)
    driver = _driver(pg_dsn, 1, A)
    driver.startup()
    assert driver.begin(harness.QUERY, 0, harness.offsets(0)) is None
    left = harness.prepare_task(driver, pg_dsn, 0, 0, harness.batch_rows(0)).gid
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE eo.fence SET owner = %s", (B,))
    with pytest.raises(ForeignFenceOwnerError):
        driver.begin(harness.QUERY, 0, harness.offsets(0))
    store = PreparedTransactions(pg_dsn)
    assert [x.gid for x in store.in_doubt("")] == [left]
    store.rollback(left)  # gids are server-wide: leave none to the next test


def _old_schema(dsn: str) -> None:
    """Schema eo as an eo before fence owners created it (eo.fence without ``owner``)."""
    ControlStore(dsn).ensure_schema()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE eo.fence DROP COLUMN owner")
        conn.execute("INSERT INTO eo.fence (pipeline, epoch) VALUES (%s, 3)", (harness.PIPELINE,))


def test_the_owner_column_is_added_to_a_control_schema_an_older_eo_created(pg_dsn: str) -> None:
    _old_schema(pg_dsn)
    control = ControlStore(pg_dsn)
    control.ensure_schema()
    fence = control.fence(harness.PIPELINE)
    assert fence is not None and (fence.epoch, fence.owner) == (3, None)
    control.raise_fence(harness.PIPELINE, 4, A)
    fence = control.fence(harness.PIPELINE)
    assert fence is not None and fence.owner == A


def test_a_role_that_may_not_add_the_owner_column_is_told_the_statement(pg_dsn: str) -> None:
    _old_schema(pg_dsn)
    role = f"driver_{psycopg.conninfo.conninfo_to_dict(pg_dsn)['dbname']}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA eo TO {}").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA eo TO {}").format(
                sql.Identifier(role)
            )
        )
    driver = ControlStore(psycopg.conninfo.make_conninfo(pg_dsn, user=role))
    with pytest.raises(SchemaUpgradeError, match=r"ALTER TABLE eo\.fence ADD COLUMN"):
        driver.ensure_schema()
