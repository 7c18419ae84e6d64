"""The disruption guard's verdict from the node list, by Kubernetes' node lifecycle rules."""

from __future__ import annotations

from typing import Any

from eo_operator.disruption import disruption


def _node(name: str, ready: bool, zone: str | None = None) -> dict[str, Any]:
    labels = {"topology.kubernetes.io/zone": zone} if zone else {}
    status = "True" if ready else "Unknown"
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": status}]},
    }


def test_one_lost_node_among_ready_ones_is_no_disruption() -> None:
    nodes = [_node("a", False), _node("b", True), _node("c", True)]
    assert disruption(nodes, "a") == ""


def test_every_node_not_ready_is_a_cluster_wide_disruption() -> None:
    said = disruption([_node("a", False), _node("b", False)], "a")
    assert said.startswith("none of the cluster's 2 nodes is Ready")


def test_a_single_node_cluster_whose_node_is_silent_is_a_disruption() -> None:
    assert disruption([_node("a", False)], "a") != ""


def test_most_of_a_small_zone_not_ready_is_a_partial_disruption() -> None:
    nodes = [_node(f"n{i}", i >= 3) for i in range(5)]  # 3 of 5 not Ready: 60 %
    assert disruption(nodes, "n0").startswith("3 of the 5 nodes of the cluster are not Ready")


def test_two_of_three_is_not_a_partial_disruption_kubernetes_needs_more_than_two() -> None:
    nodes = [_node("a", False), _node("b", False), _node("c", True)]
    assert disruption(nodes, "a") == ""


def test_a_whole_zone_lost_while_another_is_healthy_is_a_zone_failure_not_a_disruption() -> None:
    nodes = [
        *[_node(f"a{i}", False, "zone-a") for i in range(2)],
        *[_node(f"b{i}", True, "zone-b") for i in range(2)],
    ]
    assert disruption(nodes, "a0") == ""


def test_half_of_a_zone_not_ready_is_under_the_55_percent_threshold() -> None:
    nodes = [_node(f"n{i}", i >= 5, "z") for i in range(10)]  # 5 of 10: 50 %
    assert disruption(nodes, "n0") == ""


def test_a_partial_disruption_of_a_zone_over_50_nodes_does_not_hold() -> None:
    """Kubernetes keeps evicting there (at its secondary rate): so does eo."""
    nodes = [_node(f"n{i}", i >= 40, "z") for i in range(60)]  # 40 of 60: 67 %
    assert disruption(nodes, "n0") == ""
