"""Whether a driver's node problem is the cluster's, not the node's: a disruption guard.

Rule 2 of the planner fences and replaces a driver whose node has not been Ready for the
node-lost grace. That is right for one lost node and wrong when most or all nodes stop reporting
at once while the operator still reaches the API server: expired kubelet client certificates, a
load balancer in front of the API server that fails for kubelets only, an overloaded etcd that
delays node leases. The drivers then keep running and writing (their path to the database is
intact); fencing every one of them turns a control-plane problem into a data-plane outage, and
the replacements stay Pending on tainted nodes until every pipeline is Failed.

Kubernetes' node lifecycle controller guards its own evictions the same way, and eo follows its
rules so that both stand still together:

* a zone (nodes grouped by ``topology.kubernetes.io/zone``) is *fully disrupted* when none of
  its nodes is Ready, *partially disrupted* when more than 2 of its nodes and at least 55 % of
  them are not Ready (``--unhealthy-zone-threshold``);
* when every zone is fully disrupted, the controller assumes the problem is its own connection
  and evicts nothing;
* in a partially disrupted zone of at most 50 nodes (``--large-cluster-size-threshold``) its
  eviction rate is 0.

So the guard holds while every zone is fully disrupted, or while the driver's zone is partially
disrupted and has at most 50 nodes. A zone that fails alone while others are healthy is a real
zone failure: its drivers are replaced, as Kubernetes replaces its pods.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

ZONE_LABEL = "topology.kubernetes.io/zone"
UNHEALTHY_ZONE_THRESHOLD = 0.55
LARGE_ZONE_SIZE = 50


def ready(node: dict[str, Any]) -> bool:
    """The node's Ready condition is True."""
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _zone(node: dict[str, Any]) -> str:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return str(labels.get(ZONE_LABEL, ""))


def disruption(nodes: list[dict[str, Any]], driver_node: str) -> str:
    """Why the cluster, not the driver's node, is in trouble; "" when rule 2 may act."""
    zones: dict[str, list[bool]] = defaultdict(list)
    zone_of_driver = None
    for node in nodes:
        zones[_zone(node)].append(ready(node))
        if (node.get("metadata") or {}).get("name") == driver_node:
            zone_of_driver = _zone(node)
    if not zones:
        return ""
    not_ready = sum(not r for states in zones.values() for r in states)
    total = sum(len(states) for states in zones.values())
    if all(not any(states) for states in zones.values()):
        return (
            f"none of the cluster's {total} nodes is Ready (a cluster-wide disruption: "
            "Kubernetes evicts nothing either)"
        )
    states = zones.get(zone_of_driver) if zone_of_driver is not None else None
    if states is not None and len(states) <= LARGE_ZONE_SIZE:
        down = sum(not r for r in states)
        if down > 2 and down / len(states) >= UNHEALTHY_ZONE_THRESHOLD:
            where = f"zone {zone_of_driver}" if zone_of_driver else "the cluster"
            return (
                f"{down} of the {len(states)} nodes of {where} are not Ready "
                f"({not_ready} of {total} in all; a disruption, where Kubernetes stops evicting "
                "too)"
            )
    return ""
