"""The decision log on its own: every batch decided once, in order, by a rising epoch.

The primary key keeps a batch from being decided twice within a query, so what can go wrong is
subtler: a decision deleted (a missing batch id, or the batch at the last position gone), an
epoch going down along batch ids (an older driver decided after a newer one: the fence failed),
an epoch above the fence (the fence was lowered by hand), and a decision naming a participant of
another batch or epoch, or two winners for one writer task (its rows would be committed twice).
"""

from __future__ import annotations

from collections.abc import Sequence

from eo_jobs.audit.evidence import LoggedDecision
from eo_jobs.audit.model import Check, Violation
from eo_jobs.protocol.gid import Gid, pipeline_token


def check_decisions(
    pipeline: str, decisions: Sequence[LoggedDecision], position: int, fence: int | None
) -> list[Violation]:
    """Violations along one query's decisions (the anchor at ``position`` first, if any)."""
    found: list[Violation] = []
    if not decisions:
        return found
    query = decisions[0].query_id

    def say(batch: int, text: str) -> None:
        found.append(Violation(Check.DECISION_LOG, batch, query, text))

    audited = [d for d in decisions if d.batch_id > position]
    if position >= 0 and (not decisions or decisions[0].batch_id != position):
        first = audited[0].batch_id if audited else position
        say(position, f"the decision of batch {position}, audited by the last pass, is gone")
        expected, floor = first, None
    else:
        expected = position + 1
        floor = decisions[0].epoch if position >= 0 else None
    for decision in audited:
        if decision.batch_id != expected:
            say(
                expected,
                f"batches {expected}..{decision.batch_id - 1} have no decision, but batch "
                f"{decision.batch_id} does: decisions are written in batch order and deleted only "
                "with a whole query (eo forget-query), so these were removed",
            )
        expected = decision.batch_id + 1
        if floor is not None and decision.epoch < floor:
            say(
                decision.batch_id,
                f"epoch went down: batch {decision.batch_id} was decided by epoch "
                f"{decision.epoch} after an earlier batch was decided by epoch {floor}",
            )
        floor = decision.epoch if floor is None else max(floor, decision.epoch)
        if fence is not None and decision.epoch > fence:
            say(
                decision.batch_id,
                f"decided by epoch {decision.epoch}, above the fence ({fence}): the fence was "
                "lowered after it, so an older driver could decide again",
            )
        found.extend(_participants(pipeline, decision))
    return found


def _participants(pipeline: str, decision: LoggedDecision) -> list[Violation]:
    """Every participant is of this pipeline, query, batch and epoch; one per writer task."""
    found: list[Violation] = []
    tasks: dict[tuple[str, int], str] = {}
    for gid in decision.participants:
        parsed = Gid.parse(gid)
        problem = None
        if parsed is None:
            problem = f"names {gid!r}, which is not an eo transaction id"
        elif (parsed.pipeline, parsed.query) != (pipeline_token(pipeline), decision.token):
            problem = f"names {gid}, a participant of another pipeline or query"
        elif (parsed.batch, parsed.epoch) != (decision.batch_id, decision.epoch):
            problem = (
                f"names {gid}, a participant of batch {parsed.batch} epoch {parsed.epoch}: its "
                "rows would be committed under this batch"
            )
        elif (parsed.sink, parsed.task) in tasks:
            problem = (
                f"decided twice: names {tasks[(parsed.sink, parsed.task)]} and {gid} for the same "
                "writer task, so that task's rows are committed twice"
            )
        else:
            tasks[(parsed.sink, parsed.task)] = gid
        if problem:
            found.append(
                Violation(
                    Check.DECISION_LOG,
                    decision.batch_id,
                    decision.query_id,
                    f"the decision of batch {decision.batch_id} {problem}",
                )
            )
    return found
