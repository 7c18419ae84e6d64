"""``eo operator``'s leader-election settings and the standby's liveness answer (no cluster:
these are checked before the operator talks to any API server)."""

from __future__ import annotations

import urllib.request

import pytest

from eo_jobs.cli import main
from eo_jobs.pgserver import free_port
from eo_operator.leader import standby_liveness


def test_a_renew_deadline_that_outlasts_the_lease_is_refused_before_anything_starts() -> None:
    with pytest.raises(SystemExit) as exited:
        main(["operator", "--leader-election", "eo-operator", "--lease-namespace", "eo-system",
              "--lease-duration", "10", "--renew-deadline", "12"])  # fmt: skip
    assert "renew deadline < lease duration" in str(exited.value.code)


def test_leader_election_needs_the_lease_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["operator", "--leader-election", "eo-operator"])
    assert "--lease-namespace or $POD_NAMESPACE" in str(exited.value.code)


def test_leader_election_and_kopf_peering_exclude_each_other() -> None:
    with pytest.raises(SystemExit) as exited:
        main(["operator", "--leader-election", "eo-operator", "--lease-namespace", "ns",
              "--peering", "eo"])  # fmt: skip
    assert "exclude each other" in str(exited.value.code)


def test_a_standby_answers_its_liveness_probe_and_frees_the_port_for_kopf() -> None:
    port = free_port()
    with (
        standby_liveness(port),
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response,
    ):
        assert (response.status, response.read()) == (200, b"standby\n")
    with (
        standby_liveness(port),
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response,
    ):  # the port was released: it binds again
        assert response.status == 200
