"""Leader election over a real Lease on the real API server of the test control plane.

Candidates are ``LeaderElector`` objects in this process, each with its own client; a test
drives their rounds itself, so hand-overs, races and lost connections can be staged.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from eo_jobs.pgserver import free_port
from eo_operator.kube import Kube
from eo_operator.leader import LeaderElector, LeaseConfig
from tests.cluster.plugin import KubeCluster

LEASE = "eo-operator"


@pytest.fixture
def candidates(kube_cluster: KubeCluster, kube_namespace: str) -> Iterator[dict[str, Kube]]:
    """Two operators' clients (a and b), each with its own connection."""
    with ExitStack() as stack:
        yield {who: Kube(stack.enter_context(kube_cluster.api())) for who in ("a", "b")}


def _elector(kube: Kube, namespace: str, identity: str, **timing: float) -> LeaderElector:
    config = LeaseConfig(
        namespace=namespace,
        name=LEASE,
        identity=identity,
        lease_duration=timing.get("lease_duration", 4.0),
        renew_deadline=timing.get("renew_deadline", 2.5),
        retry_period=timing.get("retry_period", 0.5),
    )
    return LeaderElector(kube, config)


def _lease(cluster: KubeCluster, namespace: str) -> dict[str, object]:
    out = cluster.kubectl("get", "lease", LEASE, "-n", namespace, "-o", "json")
    return dict(json.loads(out.stdout)["spec"])


def _leader_events(cluster: KubeCluster, namespace: str) -> list[str]:
    out = cluster.kubectl("get", "events", "-n", namespace, "-o", "json")
    items = sorted(
        json.loads(out.stdout)["items"], key=lambda e: int(e["metadata"]["resourceVersion"])
    )
    return [
        f"{e['reason']}: {e['message']}"
        for e in items
        if e["involvedObject"].get("kind") == "Lease"
    ]


def test_the_first_candidate_leads_and_the_other_takes_over_only_after_the_lease_expires(
    kube_cluster: KubeCluster, kube_namespace: str, candidates: dict[str, Kube]
) -> None:
    a = _elector(candidates["a"], kube_namespace, "operator-a")
    b = _elector(candidates["b"], kube_namespace, "operator-b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    for _ in range(3):  # a keeps renewing: b keeps standing by, however long it waits
        time.sleep(1.5)
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    last_renewal = time.monotonic()
    while not b.try_acquire_or_renew():
        time.sleep(0.2)
        assert time.monotonic() - last_renewal < 15, _lease(kube_cluster, kube_namespace)
    assert time.monotonic() - last_renewal >= 4.0
    lease = _lease(kube_cluster, kube_namespace)
    assert (lease["holderIdentity"], lease["leaseTransitions"]) == ("operator-b", 1)
    assert not a.try_acquire_or_renew()
    assert _leader_events(kube_cluster, kube_namespace) == [
        "LeaderElected: operator-a became leader (lease transition 0)",
        "LeaderElected: operator-b became leader (lease transition 1)",
    ]


def test_two_candidates_racing_for_a_free_lease_never_both_win(
    kube_cluster: KubeCluster, kube_namespace: str, candidates: dict[str, Kube]
) -> None:
    electors = [
        _elector(candidates["a"], kube_namespace, "operator-a"),
        _elector(candidates["b"], kube_namespace, "operator-b"),
    ]
    for round_ in range(4):
        if round_:  # free the lease: released by its holder, both race again
            for elector in electors:
                elector.release()
        start = threading.Barrier(2)
        won: dict[str, bool] = {}

        def attempt(
            elector: LeaderElector,
            barrier: threading.Barrier = start,
            results: dict[str, bool] = won,
        ) -> None:
            barrier.wait()
            results[elector.config.identity] = elector.try_acquire_or_renew()

        threads = [threading.Thread(target=attempt, args=(e,)) for e in electors]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        assert sorted(won.values()) == [False, True], won
        holder = _lease(kube_cluster, kube_namespace)["holderIdentity"]
        assert won[str(holder)]


def test_a_leader_that_cannot_reach_the_api_server_gives_up_before_a_standby_takes_over(
    kube_cluster: KubeCluster, kube_namespace: str, candidates: dict[str, Kube]
) -> None:
    a = _elector(candidates["a"], kube_namespace, "operator-a")
    b = _elector(candidates["b"], kube_namespace, "operator-b")
    assert a.acquire()
    lost_at: list[float] = []
    a.keep_leading(lambda why: lost_at.append(time.monotonic()))
    time.sleep(2)
    assert a.leading and not lost_at
    # The leader's connection breaks (a port nobody listens on): its renewals fail.
    cut_at = time.monotonic()
    candidates["a"].api_client.configuration.host = f"https://127.0.0.1:{free_port()}"
    stop = threading.Event()
    acquired_at: list[float] = []

    def stand_by() -> None:
        if b.acquire(stop):
            acquired_at.append(time.monotonic())

    standby = threading.Thread(target=stand_by)
    standby.start()
    standby.join(30)
    stop.set()
    a.release()
    assert acquired_at, _lease(kube_cluster, kube_namespace)
    assert lost_at, "the leader never noticed"
    assert lost_at[0] < acquired_at[0]
    assert lost_at[0] - cut_at <= 2.5 + 0.5 + 0.5  # renew deadline after the last renewal
    assert not a.leading


def test_a_leader_whose_lease_was_taken_gives_up_at_its_next_renewal(
    kube_cluster: KubeCluster, kube_namespace: str, candidates: dict[str, Kube]
) -> None:
    a = _elector(candidates["a"], kube_namespace, "operator-a")
    assert a.acquire()
    lost: list[str] = []
    a.keep_leading(lost.append)
    kube_cluster.kubectl(
        "patch", "lease", LEASE, "-n", kube_namespace, "--type=merge",
        "-p", '{"spec": {"holderIdentity": "operator-z"}}',
    )  # fmt: skip
    deadline = time.monotonic() + 5
    while not lost and time.monotonic() < deadline:
        time.sleep(0.1)
    a.release()
    assert lost == ["lease eo-operator is held by operator-z"]
    assert _lease(kube_cluster, kube_namespace)["holderIdentity"] == "operator-z"


def test_a_released_lease_is_taken_at_once_not_after_it_expires(
    kube_cluster: KubeCluster, kube_namespace: str, candidates: dict[str, Kube]
) -> None:
    a = _elector(candidates["a"], kube_namespace, "operator-a", lease_duration=30.0)
    b = _elector(candidates["b"], kube_namespace, "operator-b", lease_duration=30.0)
    assert a.acquire()
    a.keep_leading(lambda why: None)
    assert not b.try_acquire_or_renew()
    a.release()
    released_at = time.monotonic()
    assert b.acquire()
    assert time.monotonic() - released_at < 5
    events = _leader_events(kube_cluster, kube_namespace)
    assert events == [
        "LeaderElected: operator-a became leader (lease transition 0)",
        "LeaderReleased: operator-a released the lease",
        "LeaderElected: operator-b became leader (lease transition 1)",
    ]
