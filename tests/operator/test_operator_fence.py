"""A sink fence ahead of the operator's epochs (a re-created pipeline, a manual
``eo recover --epoch N``) is jumped over once, with an event; it never stalls the pipeline."""

from __future__ import annotations

import pytest

from eo_jobs.protocol.control import ControlStore
from tests.operator.cluster_env import Scene

pytestmark = [pytest.mark.slow]


def test_a_fence_above_the_operators_epoch_is_jumped_once_with_an_event(scene: Scene) -> None:
    control = ControlStore(scene.dsn)
    control.ensure_schema()
    control.raise_fence(f"{scene.namespace}/{scene.name}", 100)  # `eo recover --epoch 100`
    scene.apply(suspend=True)

    def epoch() -> int:
        return int(scene.get()["metadata"].get("annotations", {}).get("eo.dev/epoch", "0"))

    key = f"{scene.namespace}/{scene.name}"
    scene.until(
        "suspended and fenced with an epoch above the old fence",
        lambda: (
            scene.status().get("phase") == "Suspended"
            and epoch() == 101
            and control.fence_epoch(key) == 101
        ),
        timeout=120,
    )
    assert "FenceAhead" in scene.events()
