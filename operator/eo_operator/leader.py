"""Leader election over a ``coordination.k8s.io`` Lease: one operator acts, the others wait.

kopf's peering is not used for this: peers of equal priority all pause (so two replicas meant
no operator at all), and peering has no notion of a lease that expires. The algorithm is
client-go's: the holder renews the Lease every ``retry_period``; another candidate takes it
over only after it has seen the same record unchanged for ``lease_duration`` (measured on its
own clock, so clock skew between nodes does not matter); every write is guarded by the Lease's
resourceVersion, so two candidates never both win one round.

A leader that has not renewed for ``renew_deadline`` (shorter than ``lease_duration``) gives
up before any standby can consider the lease expired: ``keep_leading`` calls ``on_lost``,
which in the operator ends the process (nothing keeps acting), and the pod restarts as a
standby. The status writes of the reconciler are guarded by resourceVersion as well, so even
a leader paused past its lease (a stopped VM) cannot overwrite what the new leader wrote.
"""

from __future__ import annotations

import contextlib
import http.server
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from eo_operator.kube import Kube

log = logging.getLogger("eo.operator")


@dataclass(frozen=True)
class LeaseConfig:
    """Where the Lease is, who we are, and the timings (client-go's defaults: 15/10/2 s)."""

    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election needs 0 < retry period < renew deadline < lease duration "
                f"(got {self.retry_period}, {self.renew_deadline}, {self.lease_duration}): "
                "the leader must give up before a standby can take the lease"
            )
        if not self.identity:
            raise ValueError("leader election needs an identity (the pod name, $POD_NAME)")


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Acquire, renew and release one Lease for one identity."""

    def __init__(
        self, kube: Kube, config: LeaseConfig, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.kube = kube
        self.config = config
        self.clock = clock
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def leading(self) -> bool:
        """Renewed within the renew deadline (what the holder may act on)."""
        renewed = self._renewed_at
        return renewed is not None and self.clock() - renewed < self.config.renew_deadline

    def try_acquire_or_renew(self) -> bool:
        """One round: True when this identity holds the Lease after it."""
        cfg = self.config
        started = self.clock()
        timeout = cfg.retry_period
        lease = self.kube.read_lease(cfg.namespace, cfg.name, timeout)
        now = _micro_time()
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                "spec": self._spec(now, now, 0),
            }
            return self._written(self.kube.write_lease(cfg.namespace, body, timeout), started)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, started
        duration = float(spec.get("leaseDurationSeconds") or cfg.lease_duration)
        if holder and holder != cfg.identity and started < self._observed_at + duration:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == cfg.identity:
            new_spec = self._spec(spec.get("acquireTime") or now, now, transitions)
        else:
            new_spec = self._spec(now, now, transitions + 1)
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": cfg.name,
                "namespace": cfg.namespace,
                "resourceVersion": lease["metadata"]["resourceVersion"],
            },
            "spec": new_spec,
        }
        return self._written(self.kube.write_lease(cfg.namespace, body, timeout), started)

    def _spec(self, acquired: str, renewed: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": max(1, round(self.config.lease_duration)),
            "acquireTime": acquired,
            "renewTime": renewed,
            "leaseTransitions": transitions,
        }

    def _written(self, lease: dict[str, Any] | None, started: float) -> bool:
        if lease is None:
            return False
        spec = lease.get("spec") or {}
        self._observed = (
            spec.get("holderIdentity"),
            spec.get("renewTime"),
            spec.get("leaseTransitions"),
        )
        self._observed_at = started
        became = self._renewed_at is None
        # The deadline counts from before the request was sent: the server's copy is no
        # older than that, so a standby's view of the expiry is no earlier than ours.
        self._renewed_at = started
        if became:
            transitions = int(spec.get("leaseTransitions") or 0)
            message = f"{self.config.identity} became leader (lease transition {transitions})"
            log.info("%s", message)
            self.kube.event(lease, "LeaderElected", message)
        return True

    def acquire(self, stop: threading.Event | None = None) -> bool:
        """Block until this identity leads (True), or ``stop`` is set (False)."""
        waiting = stop or threading.Event()
        reported = ""
        while not waiting.is_set():
            try:
                if self.try_acquire_or_renew():
                    return True
            except Exception as exc:  # an API hiccup: a standby keeps trying
                log.warning("leader election: cannot read or write the lease: %s", exc)
            holder = self._observed_holder()
            if holder != reported:  # once per leader, not every retry period
                log.info("standing by: lease %s is held by %s", self.config.name, holder)
                reported = holder
            waiting.wait(self.config.retry_period)
        return False

    def keep_leading(self, on_lost: Callable[[str], None]) -> None:
        """Renew every retry period; call ``on_lost`` once when leadership is gone.

        Lost means: another identity holds the Lease, or no renewal succeeded for the renew
        deadline. A watchdog measures the deadline, so a renewal stuck in a request cannot
        keep a stale leader acting.
        """
        lost = threading.Event()

        def give_up(why: str) -> None:
            if not lost.is_set() and not self._stop.is_set():
                lost.set()
                log.error("leader election: %s; stopping", why)
                on_lost(why)

        def renew() -> None:
            while not self._stop.wait(self.config.retry_period) and not lost.is_set():
                try:
                    renewed = self.try_acquire_or_renew()
                    held_by = self._observed_holder()
                    if not renewed and held_by != self.config.identity:
                        # Another identity holds it. A 409 on our own renewal (someone
                        # wrote the Lease in between) is retried until the deadline.
                        give_up(f"lease {self.config.name} is held by {held_by}")
                except Exception as exc:
                    log.warning("leader election: renewing the lease failed: %s", exc)

        def watchdog() -> None:
            while not self._stop.is_set() and not lost.is_set():
                renewed = self._renewed_at or self.clock()
                left = renewed + self.config.renew_deadline - self.clock()
                if left <= 0:
                    give_up(
                        f"lease {self.config.name} not renewed for "
                        f"{self.config.renew_deadline:g} s (the renew deadline)"
                    )
                    return
                self._stop.wait(min(left, 0.2))

        for target in (renew, watchdog):
            thread = threading.Thread(target=target, name=f"lease-{target.__name__}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _observed_holder(self) -> str:
        return str(self._observed[0]) if self._observed and self._observed[0] else "nobody"

    def release(self) -> None:
        """Stop renewing and hand the Lease over at once (a clean shutdown; best effort)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(self.config.retry_period * 2)
        if self._renewed_at is None:
            return
        cfg = self.config
        try:
            lease = self.kube.read_lease(cfg.namespace, cfg.name, cfg.retry_period)
            spec = (lease or {}).get("spec") or {}
            if lease is None or spec.get("holderIdentity") != cfg.identity:
                return
            lease["spec"] = {
                **spec,
                "holderIdentity": None,
                "leaseDurationSeconds": 1,
                "renewTime": _micro_time(),
            }
            if self.kube.write_lease(cfg.namespace, lease, cfg.retry_period) is not None:
                message = f"{cfg.identity} released the lease"
                log.info("%s", message)
                self.kube.event(lease, "LeaderReleased", message)
        except Exception as exc:
            log.warning("leader election: releasing the lease failed: %s", exc)
        finally:
            self._renewed_at = None


class _Healthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path.startswith("/healthz") else 404)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"standby\n")

    def log_message(self, *_: Any) -> None:
        """Probes every few seconds are not news."""


@contextlib.contextmanager
def standby_liveness(port: int | None) -> Iterator[None]:
    """Answer the liveness probe while waiting for the lease (kopf's endpoint starts later).

    A standby is healthy: without this the kubelet would restart it for failing probes.
    """
    if not port:
        yield
        return
    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), _Healthy)  # noqa: S104
    thread = threading.Thread(target=server.serve_forever, name="standby-liveness", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
