"""The driver's heartbeat, read by the operator from the driver's own metrics endpoint.

Spark runs no micro-batch when its sources have no new data, so the decision log alone cannot
tell an idle pipeline from a stuck one. The driver sets a heartbeat gauge on every trigger that
ran (``eo_driver_last_trigger_timestamp_seconds``, from its StreamingQueryListener); the operator
reads it here, as the Flink operator polls its JobManager's REST API, and republishes it next to
the commit figures, so one alert rule over the operator's series can say "stuck" and not "idle"
even while the driver is dead (its own series then vanish).

An unreachable driver is "not known", never "0": the no-progress clock then simply keeps
running from the last heartbeat, commit or launch the operator did see.

The same clock restarts a hung driver (``restartPolicy.progressTimeoutSeconds``, the planner's
rule 7b), but only once the driver pod's endpoint has answered this operator process
(:class:`Watch`): a driver the operator never reached may be one it cannot reach (a
NetworkPolicy, a driver still starting, an operator that just restarted), and restarting it
would not help. Once it answered, silence counts: a frozen process stops answering too. After
an operator restart or a leader change the first answer carries the driver's own heartbeat, so
the clock resumes from the driver's last trigger, neither from zero nor from a time no one
watched.
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass
from typing import Final

from prometheus_client.parser import text_string_to_metric_families

HEARTBEAT: Final = "eo_driver_last_trigger_timestamp_seconds"
WAITING: Final = "eo_driver_source_offsets_behind_latest"
TIMEOUT_SECONDS: Final = 2.0


@dataclass(frozen=True)
class DriverProgress:
    """What the driver reported at its last trigger."""

    last_trigger_time: float | None
    """Unix time; None before the driver's first trigger."""
    offsets_behind_latest: float | None


@dataclass(frozen=True)
class Watch:
    """What this operator process saw of one driver pod's endpoint."""

    pod: str
    answered: float
    """Unix time the pod's endpoint first answered this process: the driver had started."""
    last_trigger_time: float | None = None
    """The newest heartbeat the endpoint reported (the driver's clock)."""

    @property
    def newest(self) -> float:
        """The driver's last trigger; before its first one, when its endpoint first answered."""
        return self.last_trigger_time or self.answered


def watch(
    previous: Watch | None, pod: str, read: DriverProgress | None, now: float
) -> Watch | None:
    """The watch after one read of ``pod``'s endpoint; ``read`` None: it did not answer, and
    what was seen of the same pod stands (a watch of another pod is dropped)."""
    if previous is not None and previous.pod != pod:
        previous = None
    if read is None:
        return previous
    if previous is None:
        return Watch(pod, now, read.last_trigger_time)
    return Watch(pod, previous.answered, read.last_trigger_time or previous.last_trigger_time)


def parse_driver_progress(exposition: str, pipeline: str) -> DriverProgress:
    """The heartbeat and waiting input of ``pipeline`` (its ``namespace/name`` key)."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name in (HEARTBEAT, WAITING) and sample.labels.get("pipeline") == pipeline:
                found[sample.name] = float(sample.value)
    beat = found.get(HEARTBEAT)
    return DriverProgress(
        last_trigger_time=beat if beat else None, offsets_behind_latest=found.get(WAITING)
    )


def read_driver_progress(
    host: str, port: int, pipeline: str, timeout: float = TIMEOUT_SECONDS
) -> DriverProgress | None:
    """GET the driver's /metrics; None when it does not answer (yet) or answers nonsense."""
    address = f"[{host}]" if ":" in host else host
    try:
        with urllib.request.urlopen(
            f"http://{address}:{port}/metrics", timeout=timeout
        ) as response:
            body = response.read().decode("utf-8", "replace")
        return parse_driver_progress(body, pipeline)
    except (OSError, ValueError):
        return None
