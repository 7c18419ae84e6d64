"""The operator lists and watches only eo's driver pods, not every pod of the cluster (review
operator-2, N8).

kopf filters a handler's ``labels=`` on the client, after it has listed, parsed and remembered
every object of the watched resource: cluster-wide that is every pod of the cluster, in a
memory-limited process. Only ``settings.watching.label_selectors`` makes the API server filter.
"""

from __future__ import annotations

import kopf

from eo_jobs.spec import parse_pipeline
from eo_operator import resources
from eo_operator.main import configure

PODS = kopf.Resource(
    group="", version="v1", plural="pods", kind="Pod", singular="pod", namespaced=True
)
PIPELINES = kopf.Resource(
    group="eo.dev",
    version="v1alpha1",
    plural="exactlyoncepipelines",
    kind="ExactlyOncePipeline",
    singular="exactlyoncepipeline",
    namespaced=True,
)


def _selector(settings: kopf.OperatorSettings, resource: kopf.Resource) -> set[str]:
    """The label selector kopf sends when it lists and watches ``resource`` (as it joins it)."""
    return {
        term
        for selector in settings.watching.label_selectors.collect(resource)
        for term in selector.split(",")
    }


def test_pods_are_listed_and_watched_with_the_driver_pod_labels() -> None:
    settings = kopf.OperatorSettings()
    configure(settings=settings)
    assert _selector(settings, PODS) == {
        "app.kubernetes.io/managed-by=eo",
        "app.kubernetes.io/component=driver",
    }


def test_the_selector_matches_the_driver_pods_eo_builds() -> None:
    # The pod handler wakes a pipeline on its driver's events: none of them may be filtered out.
    doc = {
        "apiVersion": "eo.dev/v1alpha1",
        "kind": "ExactlyOncePipeline",
        "metadata": {"name": "orders", "namespace": "shop"},
        "spec": {
            "source": {"files": {"path": "/in", "format": "json", "schema": "id BIGINT"}},
            "sinks": [
                {
                    "name": "s",
                    "postgres": {
                        "dsn": {"secretKeyRef": {"name": "db", "key": "dsn"}},
                        "table": "public.t",
                    },
                }
            ],
            "checkpoint": {"location": "/ckpt"},
            # A template's labels may not take eo's place.
            "driver": {"podTemplate": {"metadata": {"labels": {"team": "payments"}}}},
        },
    }
    owner = {"metadata": {"name": "orders", "uid": "u-1"}}
    pod = resources.driver_pod(parse_pipeline(doc), owner, 1, "eo-job:test", None)
    settings = kopf.OperatorSettings()
    configure(settings=settings)
    labels = pod["metadata"]["labels"]
    for term in _selector(settings, PODS):
        key, value = term.split("=")
        assert labels.get(key) == value, term


def test_the_pipelines_themselves_are_not_filtered() -> None:
    settings = kopf.OperatorSettings()
    configure(settings=settings)
    assert _selector(settings, PIPELINES) == set()
