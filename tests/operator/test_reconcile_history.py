"""What runs, what last worked and how it got here, on the real object (issue 32 item 4).

The real Reconciler against the real API server and PostgreSQL; the process kubelet runs a
stand-in driver (a process that idles until stopped, or exits 1 when told to), and the test
decides batches in the real decision log with the driver's epoch, as the driver would. A
launch shows ``driverGeneration``; a decided batch of that driver makes its spec
``lastStable``; a failing edit leaves ``lastStable`` where it was; a working edit that decides
moves it; ``history`` tells each step, newest last.
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from typing import Any

import pytest

from eo_jobs.pgserver import free_port
from tests.operator.reconcile_env import Scene, stand_in

pytestmark = [pytest.mark.slow]

STAND_IN = """#!@PYTHON@
# A driver that idles until it is stopped (SIGTERM ends it), or fails at once when told to.
import os, sys, time

if os.environ.get("STAND_IN_EXIT"):
    print("stand-in driver: failing on purpose", flush=True)
    sys.exit(1)
print("stand-in driver up", flush=True)
while True:
    time.sleep(1)
"""


def _stand_in(folder: Path) -> Path:
    return stand_in(folder, STAND_IN)


def _apply(scene: Scene, folder: Path, port: int, **env: str) -> None:
    variables = [
        {"name": "PATH", "value": f"{folder}{os.pathsep}{os.environ['PATH']}"},
        *({"name": k, "value": v} for k, v in env.items()),
    ]
    scene.apply(
        suspend=False,
        restartPolicy={"backoffSeconds": 1, "maxRestarts": 20},
        driver={
            "metricsPort": port,
            "podTemplate": {"spec": {"containers": [{"name": "driver", "env": variables}]}},
        },
    )


def _status(scene: Scene) -> dict[str, Any]:
    return dict(scene.get().get("status") or {})


def _pass_until(scene: Scene, done: Any, seconds: float, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        status = _status(scene)
        if done(status):
            return status
        assert time.monotonic() < deadline, (what, scene.pods(), status)
        scene.reconcile()
        time.sleep(0.5)


def _live_driver(scene: Scene) -> dict[str, Any]:
    pods = scene.reconciler.kube.driver_pods(scene.namespace, "orders")
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return max(live, key=lambda p: int(p["metadata"]["labels"]["eo.dev/epoch"]))


def _decide(scene: Scene, batch: int, epoch: int) -> None:
    """A batch decided by the driver of ``epoch``, under its fence."""
    control = scene.control()
    try:
        control.decide(
            pipeline=scene.key,
            query_id="q",
            batch_id=batch,
            epoch=epoch,
            participants=[],
            source_offsets=None,
            rows_written=0,
            prepare_ms=0.0,
        )
    finally:
        control.close()


def _steps(status: dict[str, Any]) -> list[tuple[str, str]]:
    return [(t["phase"], t.get("reason", "")) for t in status.get("history") or []]


def test_driver_generation_last_stable_and_history_through_launch_commit_edits(
    reconcile_scene: Scene, tmp_path: Path
) -> None:
    scene = reconcile_scene
    scene.reconciler.settings.health_interval = 0.0
    folder, port = _stand_in(tmp_path / "stand-in"), free_port()

    # Generation 1 launches and runs; nothing decided yet: nothing stable.
    _apply(scene, folder, port, STAND_IN_VERSION="1")
    first = _pass_until(scene, lambda s: s.get("phase") == "Running", 90, "generation 1 runs")
    pod = _live_driver(scene)
    hash_1 = pod["metadata"]["labels"]["eo.dev/spec-hash"]
    assert pod["metadata"]["annotations"]["eo.dev/generation"] == "1"
    assert (first["driverGeneration"], first["driverSpecHash"], first["epoch"]) == (1, hash_1, 1)
    assert "lastStable" not in first
    assert _steps(first) == [("Starting", "Launch"), ("Running", "Running")]
    assert [t.get("epoch") for t in first["history"]] == [1, 1]

    # Its driver decides a batch: generation 1 is stable.
    _decide(scene, 0, epoch=1)
    stable_1 = _pass_until(scene, lambda s: "lastStable" in s, 30, "generation 1 is stable")
    assert stable_1["lastStable"]["specHash"] == hash_1
    assert stable_1["lastStable"]["generation"] == 1
    since_1 = stable_1["lastStable"]["since"]
    for _ in range(3):  # passes that change nothing add nothing
        scene.reconcile()
    assert _steps(_status(scene)) == _steps(first)

    # Generation 2 fails at once: stopped, relaunched, failing; lastStable stays generation 1.
    _apply(scene, folder, port, STAND_IN_VERSION="2", STAND_IN_EXIT="1")
    failing = _pass_until(
        scene, lambda s: s.get("reason") == "DriverFailed", 120, "generation 2 fails"
    )
    assert failing["lastStable"] == {"specHash": hash_1, "generation": 1, "since": since_1}
    assert _steps(failing)[:5] == [
        ("Starting", "Launch"),
        ("Running", "Running"),
        ("Stopping", "SpecChanged"),
        ("Starting", "Relaunch"),
        ("Backoff", "DriverFailed"),
    ]
    assert failing["history"][3]["epoch"] == 2
    assert "exited with code 1" in failing["history"][4]["message"]

    # Generation 3 works: it runs, and until its own batch is decided lastStable stays.
    _apply(scene, folder, port, STAND_IN_VERSION="3")
    running_3 = _pass_until(
        scene,
        lambda s: s.get("phase") == "Running" and s.get("driverGeneration") == 3,
        120,
        "generation 3 runs",
    )
    pod_3 = _live_driver(scene)
    epoch_3 = int(pod_3["metadata"]["labels"]["eo.dev/epoch"])
    hash_3 = pod_3["metadata"]["labels"]["eo.dev/spec-hash"]
    assert hash_3 not in (hash_1, failing.get("driverSpecHash"))
    assert running_3["driverSpecHash"] == hash_3
    assert running_3["lastStable"]["generation"] == 1
    _decide(scene, 1, epoch=epoch_3)
    stable_3 = _pass_until(
        scene,
        lambda s: (s.get("lastStable") or {}).get("generation") == 3,
        30,
        "generation 3 is stable",
    )
    assert stable_3["lastStable"]["specHash"] == hash_3

    history = stable_3["history"]
    assert 0 < len(history) <= 10
    assert (history[-1]["phase"], history[-1]["reason"], history[-1]["epoch"]) == (
        "Running",
        "Running",
        epoch_3,
    )
    steps = _steps(stable_3)
    assert all(a != b for a, b in itertools.pairwise(steps)), steps
    times = [t["time"] for t in history]
    assert times == sorted(times)

    # The runbook's command (docs/runbook.md, "What runs, what last worked, how it got here").
    out = scene.cluster.kubectl(
        "get", "eop", "orders", "-n", scene.namespace, "-o",
        "jsonpath={range .status.history[*]}{.time} {.phase} {.reason} e{.epoch}: {.message}"
        '{"\\n"}{end}',
    )  # fmt: skip
    lines = out.stdout.splitlines()
    assert len(lines) == len(history)
    assert lines[-1].startswith(f"{history[-1]['time']} Running Running e{epoch_3}: driver ")
