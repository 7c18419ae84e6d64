"""What a pass of a pipeline that has nothing to do costs (review B24, issue 11 item 1).

At 1,000 pipelines, a pass every few seconds that always patched status, and a sink health
check every 10 s even for suspended pipelines, were most of the operator's API and database
load. A pass that changes nothing writes nothing; an idle pipeline checks its sinks rarely;
and no pipeline waits longer than ``max_requeue`` between passes (the freshness bound).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tests.operator.reconcile_env import NAME, Scene


def _settle(scene: Scene) -> None:
    """Passes until the suspended pipeline's recovery is done and status says Suspended."""
    for _ in range(5):
        scene.reconcile()
    assert scene.get()["status"]["phase"] == "Suspended"


def _recording(scene: Scene) -> list[tuple[str, str]]:
    """From now on, every request the reconciler sends, as (method, url)."""
    sent: list[tuple[str, str]] = []
    rest = scene.reconciler.kube.api_client.rest_client
    send: Callable[..., Any] = rest.request

    def recorded(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        sent.append((method, url))
        return send(method, url, *args, **kwargs)

    rest.request = recorded  # type: ignore[method-assign]
    return sent


def test_a_pass_that_changes_nothing_writes_nothing(reconcile_scene: Scene) -> None:
    scene = reconcile_scene
    scene.apply()
    _settle(scene)
    sent = _recording(scene)
    for _ in range(3):
        scene.reconcile()
    # The API server would not store a no-op patch, but it still decodes, admits and compares
    # it: one request per pass per pipeline for nothing.
    assert [m for m, _ in sent if m != "GET"] == []


def test_an_idle_pipeline_checks_its_sinks_rarely(reconcile_scene: Scene) -> None:
    scene = reconcile_scene
    scene.reconciler.settings = replace(
        scene.reconciler.settings, health_interval=0.0, idle_health_interval=3600.0
    )
    scene.apply()
    _settle(scene)
    sent = _recording(scene)
    for _ in range(3):
        scene.reconcile()
    assert [u for _, u in sent if "/secrets/" in u] == []


def test_no_pipeline_waits_longer_than_max_requeue(reconcile_scene: Scene) -> None:
    scene = reconcile_scene
    scene.reconciler.settings = replace(scene.reconciler.settings, max_requeue=7.0)
    scene.apply()
    _settle(scene)
    # The planner asks for 30 s for a suspended pipeline; freshness caps it.
    assert scene.reconciler.reconcile(scene.namespace, NAME) == 7.0
