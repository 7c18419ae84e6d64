"""The chart rendered by Helm's own engine (helm-python-sdk embeds Helm's Go library).

Values are passed as Helm's CLI would pass them: ``--set`` expressions go through Helm's own
``strvals`` parser, and rendering validates them against ``values.schema.json``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "eo"
RELEASE = "eo"
NAMESPACE = "eo-system"

Manifest = dict[str, Any]

# Every optional feature on: monitoring objects, two operator replicas (anti-affinity),
# NetworkPolicies with egress rules.
ALL_FEATURES = (
    "operator.replicaCount=2",
    "networkPolicy.egress.enabled=true",
    "operator.serviceMonitor.enabled=true",
    "driver.podMonitor.enabled=true",
    "monitoring.prometheusRule.enabled=true",
    "monitoring.grafanaDashboard.enabled=true",
    "monitoring.grafanaAlerting.enabled=true",
)
NAMESPACED = ("operator.watchNamespaces={team-a,team-b}",)

# The values profiles every chart-wide property is checked against.
PROFILES: dict[str, tuple[str, ...]] = {
    "default": (),
    "all-features": ALL_FEATURES,
    "namespaced": NAMESPACED,
    "namespaced-all-features": NAMESPACED + ALL_FEATURES,
}


def set_values(*expressions: str) -> dict[str, Any]:
    """Values from ``--set`` expressions, parsed by Helm's strvals like ``helm --set``."""
    if not expressions:
        return {}
    return helm_python.parse_set_string(",".join(expressions))


def render(
    values: dict[str, Any] | None = None, *, release: str = RELEASE, namespace: str = NAMESPACE
) -> list[Manifest]:
    """Every object the chart's templates render (CRDs excluded), in template order."""
    with helm_python.Chart.load(CHART) as chart:
        rendered = chart.render(values, name=release, namespace=namespace, is_install=True)
    objects: list[Manifest] = []
    for path in sorted(rendered):
        if path.endswith(".yaml"):
            objects.extend(doc for doc in yaml.safe_load_all(rendered[path]) if doc)
    return objects


def render_profile(name: str) -> list[Manifest]:
    """The objects of one named values profile."""
    return render(set_values(*PROFILES[name]))


def chart_crds() -> dict[str, str]:
    """The chart's CRD files (``crds/``) by file name, as Helm loads them."""
    with helm_python.Chart.load(CHART) as chart:
        return {Path(crd["filename"]).name: crd["data"] for crd in chart.crds}


def kinds(objects: list[Manifest]) -> Counter[str]:
    """How many objects of each kind."""
    return Counter(str(obj["kind"]) for obj in objects)


def find(objects: list[Manifest], kind: str, name: str, namespace: str | None = None) -> Manifest:
    """The one object of ``kind`` named ``name`` (in ``namespace`` when given)."""
    matches = [
        obj
        for obj in objects
        if obj["kind"] == kind
        and obj["metadata"]["name"] == name
        and (namespace is None or obj["metadata"].get("namespace") == namespace)
    ]
    assert len(matches) == 1, f"{len(matches)} {kind} named {name} in {namespace}"
    return matches[0]


POD_TEMPLATE_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}


def pod_specs(objects: list[Manifest]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(object name, pod spec) of every pod template and pod the chart renders."""
    for obj in objects:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] in POD_TEMPLATE_KINDS:
            yield name, obj["spec"]["template"]["spec"]
        elif obj["kind"] == "CronJob":
            yield name, obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        elif obj["kind"] == "Pod":
            yield name, obj["spec"]
