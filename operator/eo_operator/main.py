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
from kubernetes import client
from kubernetes import config as kube_config
from prometheus_client import CollectorRegistry

from eo_jobs import logs
from eo_operator.crd_check import OutdatedCrdError, check_served_crd
from eo_operator.handlers import DEFAULT_WORKERS, Executors, register
from eo_operator.kube import Kube
from eo_operator.leader import LeaderElector, LeaseConfig, standby_liveness
from eo_operator.metrics import PipelineMetrics
from eo_operator.reconciler import Reconciler, Settings
from eo_operator.resources import DRIVER_POD_SELECTOR


def load_kube_config() -> None:
    """In-cluster credentials in a pod, else ``$KUBECONFIG`` / ``~/.kube/config``."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        kube_config.load_incluster_config()  # type: ignore[no-untyped-call]
    else:
        kube_config.load_kube_config()  # type: ignore[no-untyped-call]


def _pool_config(workers: int) -> client.Configuration:
    """The loaded client configuration with one HTTP connection per thread that may use it
    (the reconcile and finalize threads, the Lease renewer): the default, cores * 5, would
    make threads of a large ``--workers`` queue for a connection or reconnect each time."""
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, 2 * workers)
    return configuration


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
        settings = Settings()
    except ValueError as exc:
        raise SystemExit(f"eo operator: {exc}") from None
    load_kube_config()
    workers = int(getattr(args, "workers", DEFAULT_WORKERS))
    metrics = PipelineMetrics(CollectorRegistry())
    kube = Kube(
        client.ApiClient(_pool_config(workers)),
        on_request=lambda method, _url: metrics.count_api_request(method),
    )
    try:
        check_served_crd(kube.api_client)
    except OutdatedCrdError as exc:
        raise SystemExit(f"eo operator: {exc}") from None
    except Exception as exc:  # the API server unreachable: kopf retries it from here on
        logging.getLogger("eo.operator").warning(
            "could not read the CustomResourceDefinition to check it (%s): %s",
            type(exc).__name__,
            " ".join(str(exc).split())[:300],
        )
    if args.metrics_port:
        metrics.serve(args.metrics_port)
    elector = None
    if lease is not None:
        elector = LeaderElector(kube, lease)
        with standby_liveness(args.liveness_port):
            elector.acquire()
        elector.keep_leading(_leadership_lost)
    metrics.leading(True)  # a lost lease ends the process (_leadership_lost)
    try:
        return _run_kopf(args, kube, metrics, settings, standalone=elector is not None)
    finally:
        metrics.leading(False)
        if elector is not None:
            elector.release()


def configure(settings: kopf.OperatorSettings, **_: object) -> None:
    """kopf's settings for eo (its startup handler)."""
    settings.posting.level = logging.WARNING
    settings.persistence.finalizer = "eo.dev/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="eo.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="eo.dev", key="last-handled-configuration"
    )
    settings.watching.server_timeout = 60
    # The API server lists and watches only driver pods. The pod handler's ``labels=`` is
    # applied by kopf on the client, after it has received, parsed and remembered each pod:
    # cluster-wide that would be every pod of the cluster, in a memory-limited process.
    settings.watching.label_selectors[("", "v1", "pods")] = DRIVER_POD_SELECTOR
    # Every eo handler is async (blocking work goes to ``executors``); kopf's own pool
    # only runs sync helpers such as the login handler.
    settings.execution.max_workers = 4


def _run_kopf(
    args: argparse.Namespace,
    kube: Kube,
    metrics: PipelineMetrics,
    settings: Settings,
    standalone: bool,
) -> int:
    registry = kopf.OperatorRegistry()
    executors = Executors(int(getattr(args, "workers", DEFAULT_WORKERS)))
    register(registry, Reconciler(kube, metrics, settings), executors)

    # A private registry does not get kopf's default login handlers: use the client's config
    # (in-cluster ServiceAccount, or the kubeconfig), as the rest of the operator does.
    kopf.on.login(registry=registry)(kopf.login_via_client)
    kopf.on.startup(registry=registry)(configure)

    try:
        _kopf_run(args, registry, standalone)
    finally:
        executors.shutdown()
    return 0


def _kopf_run(args: argparse.Namespace, registry: kopf.OperatorRegistry, standalone: bool) -> None:
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
