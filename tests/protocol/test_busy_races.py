"""Two finishers of one prepared transaction (sweep vs driver, zombie vs live driver) never raise.

PostgreSQL answers the second of two concurrent COMMIT/ROLLBACK PREPARED of one gid with
"prepared transaction ... is busy" (SQLSTATE 55000) while the first is at work; that must be a
retry, ending in "already committed" / "already rolled back", not an exception. MariaDB (the
same races with the sink there, ``sink_dsn``) answers the second with XAER_NOTA once the first
is done: the branch is no longer listed, and the marker decides.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import pytest

from eo_jobs.protocol.databases import participant_store
from eo_jobs.protocol.participants import Outcome, ParticipantStore
from tests.protocol import harness

RACES = 150


def _race(dsn: str, verb: Callable[[ParticipantStore, str], Outcome]) -> Counter[str]:
    harness.create_table(dsn)
    left, right = participant_store(dsn), participant_store(dsn)
    left.ensure_schema()
    outcomes: Counter[str] = Counter()
    errors: list[BaseException] = []
    for race in range(RACES):
        gid = f"eo1:race-00000000:0000000000000000:s-00000000:1:{race}:0:0"
        harness.writer(dsn).write([(race, 0, 1, 0)], gid=gid, pipeline="race", batch_id=race)
        start = threading.Barrier(2)

        def finish(
            store: ParticipantStore, gid: str = gid, start: threading.Barrier = start
        ) -> None:
            start.wait()
            try:
                outcomes[verb(store, gid).value] += 1
            except BaseException as exc:  # the failure this test is about
                errors.append(exc)

        threads = [threading.Thread(target=finish, args=(s,)) for s in (left, right)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    left.close()
    right.close()
    assert not errors, f"{len(errors)} of {RACES} races raised, e.g. {errors[0]!r}"
    return outcomes


@pytest.mark.parametrize(
    ("verb", "acted", "already"),
    [
        (ParticipantStore.commit, Outcome.COMMITTED, Outcome.ALREADY_COMMITTED),
        (ParticipantStore.rollback, Outcome.ROLLED_BACK, Outcome.ALREADY_ROLLED_BACK),
    ],
)
def test_two_finishers_of_one_gid_never_raise_and_exactly_one_acts(
    sink_dsn: str,
    verb: Callable[[ParticipantStore, str], Outcome],
    acted: Outcome,
    already: Outcome,
) -> None:
    outcomes = _race(sink_dsn, verb)
    assert outcomes == Counter({acted.value: RACES, already.value: RACES})
