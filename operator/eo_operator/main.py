"""``eo operator``: configure the Kubernetes client, metrics and kopf, then run.

With ``--leader-election LEASE`` (what the chart passes) the operator first takes the Lease
(``leader``): a standby waits here, answering its liveness probe, and kopf starts only once it
leads, standalone (kopf's own peering stays off: its equal-priority peers all pause). A leader
that cannot renew ends the process before its lease can expire, so at most one operator acts;
on a clean stop it releases the Lease so the standby takes over at once. ``--peering NAME``
(kopf peering) is kept for a single operator beside kopf tooling only; it is not HA.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket

import kopf
from kubernetes import config as kube_config
from prometheus_client import CollectorRegistry

from eo_jobs import logs
from eo_operator.handlers import register
from eo_operator.kube import Kube
from eo_operator.leader import LeaderElector, LeaseConfig, standby_liveness
from eo_operator.metrics import PipelineMetrics
from eo_operator.reconciler import Reconciler, Settings


def load_kube_config() -> None:
    """In-cluster credentials in a pod, else ``$KUBECONFIG`` / ``~/.kube/config``."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        kube_config.load_incluster_config()  # type: ignore[no-untyped-call]
    else:
        kube_config.load_kube_config()  # type: ignore[no-untyped-call]


EXIT_LEADERSHIP_LOST = 3
"""Exit code of a leader that could not renew its Lease (the pod restarts as a standby)."""


def lease_config(args: argparse.Namespace) -> LeaseConfig | None:
    """The Lease settings from the command line, or None without ``--leader-election``."""
    if not args.leader_election:
        return None
    if args.peering:
        raise SystemExit("eo operator: --leader-election and --peering exclude each other")
    namespace = args.lease_namespace or os.environ.get("POD_NAMESPACE")
    if not namespace:
        raise SystemExit(
            "eo operator: --leader-election needs the Lease's namespace: --lease-namespace "
            "or $POD_NAMESPACE"
        )
    return LeaseConfig(
        namespace=namespace,
        name=args.leader_election,
        identity=os.environ.get("POD_NAME") or socket.gethostname(),
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
    )


def _leadership_lost(why: str) -> None:
    """Stop everything at once: no reconcile may run once a standby can take over."""
    logging.getLogger("eo.operator").critical("leadership lost (%s); exiting", why)
    logging.shutdown()
    os._exit(EXIT_LEADERSHIP_LOST)


def operator_cli(args: argparse.Namespace) -> int:
    """Run the operator until interrupted."""
    logs.configure(getattr(args, "log_format", None))
    try:
        lease = lease_config(args)
    except ValueError as exc:
        raise SystemExit(f"eo operator: {exc}") from None
    load_kube_config()
    kube = Kube()
    metrics = PipelineMetrics(CollectorRegistry())
    if args.metrics_port:
        metrics.serve(args.metrics_port)
    elector = None
    if lease is not None:
        elector = LeaderElector(kube, lease)
        with standby_liveness(args.liveness_port):
            elector.acquire()
        elector.keep_leading(_leadership_lost)
    try:
        return _run_kopf(args, kube, metrics, standalone=elector is not None)
    finally:
        if elector is not None:
            elector.release()


def _run_kopf(
    args: argparse.Namespace, kube: Kube, metrics: PipelineMetrics, standalone: bool
) -> int:
    registry = kopf.OperatorRegistry()
    register(registry, Reconciler(kube, metrics, Settings()))

    # A private registry does not get kopf's default login handlers: use the client's config
    # (in-cluster ServiceAccount, or the kubeconfig), as the rest of the operator does.
    kopf.on.login(registry=registry)(kopf.login_via_client)

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: object) -> None:
        settings.posting.level = logging.WARNING
        settings.persistence.finalizer = "eo.dev/finalizer"
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="eo.dev")
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix="eo.dev", key="last-handled-configuration"
        )
        settings.watching.server_timeout = 60

    kopf.run(
        registry=registry,
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        standalone=standalone or args.peering is None,
        peering_name=None if standalone else args.peering,
        liveness_endpoint=f"http://0.0.0.0:{args.liveness_port}/healthz"
        if args.liveness_port
        else None,
    )
    return 0
