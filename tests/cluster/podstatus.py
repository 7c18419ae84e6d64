"""Pod status documents as the real kubelet writes them, for each state of a process.

Pure functions of the pod and what happened to its process: the kubelet sends the result as
a strategic-merge patch of the ``status`` subresource. Only the first container runs; any
other container is reported waiting with reason ``NotRunByProcessKubelet`` so nobody
mistakes it for running.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubernetes.client import V1Pod

from tests.cluster.podenv import POD_IP

Status = dict[str, Any]


def timestamp(moment: datetime) -> str:
    """RFC 3339 in UTC with second precision, as the API stores ``metav1.Time``."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Exit:
    """How a process ended: its exit code (128 + signal when killed) and why."""

    code: int
    reason: str
    message: str = ""

    @classmethod
    def from_returncode(cls, returncode: int) -> Exit:
        """Map a ``Popen.returncode`` (negative for a signal) to the container convention."""
        code = 128 - returncode if returncode < 0 else returncode
        return cls(code=code, reason="Completed" if code == 0 else "Error")


def _conditions(now: str, ready: bool, reason: str | None) -> list[dict[str, Any]]:
    def condition(kind: str, status: bool, why: str | None = None) -> dict[str, Any]:
        entry = {
            "type": kind,
            "status": "True" if status else "False",
            "lastTransitionTime": now,
            "lastProbeTime": None,
        }
        if why is not None and not status:
            entry["reason"] = why
        return entry

    return [
        condition("PodReadyToStartContainers", ready),
        condition("Initialized", True),
        condition("Ready", ready, reason),
        condition("ContainersReady", ready, reason),
        condition("PodScheduled", True),
    ]


def _container_statuses(pod: V1Pod, first: dict[str, Any], ready: bool) -> list[dict[str, Any]]:
    assert pod.spec is not None
    containers = pod.spec.containers
    statuses = [
        {
            "name": containers[0].name,
            "image": containers[0].image or "",
            "imageID": "",
            "ready": ready,
            "started": "running" in first,
            "restartCount": 0,
            "state": first,
        }
    ]
    for other in containers[1:]:
        statuses.append(
            {
                "name": other.name,
                "image": other.image or "",
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {
                    "waiting": {
                        "reason": "NotRunByProcessKubelet",
                        "message": "the process kubelet runs the first container only",
                    }
                },
            }
        )
    return statuses


def _base(pod: V1Pod, phase: str, started: datetime | None) -> Status:
    status: Status = {"phase": phase, "hostIP": POD_IP, "hostIPs": [{"ip": POD_IP}]}
    if started is not None:
        status["startTime"] = timestamp(started)
    assert pod.metadata is not None
    if pod.metadata.generation is not None:
        status["observedGeneration"] = pod.metadata.generation
    return status


def waiting(pod: V1Pod, now: datetime, reason: str, message: str) -> Status:
    """Pending: the container cannot be created yet (e.g. a referenced Secret is missing)."""
    stamp = timestamp(now)
    status = _base(pod, "Pending", now)
    status["conditions"] = _conditions(stamp, ready=False, reason="ContainersNotReady")
    status["containerStatuses"] = _container_statuses(
        pod, {"waiting": {"reason": reason, "message": message}}, ready=False
    )
    return status


def running(pod: V1Pod, now: datetime, started: datetime, pid: int) -> Status:
    """Running and Ready: the process is alive (probes are not run)."""
    stamp = timestamp(now)
    status = _base(pod, "Running", started)
    status.update(podIP=POD_IP, podIPs=[{"ip": POD_IP}])
    status["conditions"] = _conditions(stamp, ready=True, reason=None)
    state = {"running": {"startedAt": timestamp(started)}}
    status["containerStatuses"] = _container_statuses(pod, state, ready=True)
    status["containerStatuses"][0]["containerID"] = f"process://{pid}"
    return status


def terminated(
    pod: V1Pod,
    now: datetime,
    started: datetime | None,
    finished: datetime,
    end: Exit,
    termination_message: str = "",
) -> Status:
    """Succeeded (exit 0) or Failed, with the exit code in ``state.terminated``.

    ``termination_message`` is the container's own (``terminationMessagePolicy``): it goes to
    ``state.terminated.message`` only, while ``end.message`` (the kubelet's reason for failing
    the pod) is also the pod's message."""
    stamp = timestamp(now)
    phase = "Succeeded" if end.code == 0 else "Failed"
    status = _base(pod, phase, started or finished)
    status["conditions"] = _conditions(stamp, ready=False, reason="PodCompleted")
    state: dict[str, Any] = {
        "exitCode": end.code,
        "reason": end.reason,
        "startedAt": timestamp(started or finished),
        "finishedAt": timestamp(finished),
    }
    if end.message:
        state["message"] = end.message
        status.update(reason=end.reason, message=end.message)
    elif termination_message:
        state["message"] = termination_message
    status["containerStatuses"] = _container_statuses(pod, {"terminated": state}, ready=False)
    return status
