"""The metric names the operator and the driver really export, read from their registries.

Rules and dashboards name series (``*_total``, ``*_bucket``), not metric families, so each
family is expanded with the suffixes Prometheus adds for its type.
"""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

from eo_jobs.runtime.metrics import DriverMetrics
from eo_operator.metrics import PipelineMetrics

_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
}

EO_SERIES = re.compile(r"\beo_[a-z0-9_]+\b")
"""Every eo series name in a PromQL expression (every eo metric starts with eo_)."""


def defined_series_names() -> frozenset[str]:
    """Series names of every family on fresh operator and driver registries."""
    registry = CollectorRegistry()
    PipelineMetrics(registry)
    DriverMetrics("introspection", registry=registry)
    names: set[str] = set()
    for family in registry.collect():
        names.update(family.name + suffix for suffix in _SUFFIXES[family.type])
    return frozenset(names)


def referenced_series_names(expression: str) -> set[str]:
    """eo series names used in one PromQL expression."""
    return set(EO_SERIES.findall(expression))
