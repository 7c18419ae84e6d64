"""``eo operator``: configure the Kubernetes client, metrics and kopf, then run.

With ``--peering NAME`` kopf's peering elects one active operator among replicas (the chart
creates the peering object); without it the operator runs standalone.
"""

from __future__ import annotations

import argparse
import logging
import os

import kopf
from kubernetes import config as kube_config
from prometheus_client import CollectorRegistry

from eo_jobs import logs
from eo_operator.handlers import register
from eo_operator.kube import Kube
from eo_operator.metrics import PipelineMetrics
from eo_operator.reconciler import Reconciler, Settings


def load_kube_config() -> None:
    """In-cluster credentials in a pod, else ``$KUBECONFIG`` / ``~/.kube/config``."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        kube_config.load_incluster_config()  # type: ignore[no-untyped-call]
    else:
        kube_config.load_kube_config()  # type: ignore[no-untyped-call]


def operator_cli(args: argparse.Namespace) -> int:
    """Run the operator until interrupted."""
    logs.configure(getattr(args, "log_format", None))
    load_kube_config()
    metrics = PipelineMetrics(CollectorRegistry())
    if args.metrics_port:
        metrics.serve(args.metrics_port)
    registry = kopf.OperatorRegistry()
    register(registry, Reconciler(Kube(), metrics, Settings()))

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
        standalone=args.peering is None,
        peering_name=args.peering,
        liveness_endpoint=f"http://0.0.0.0:{args.liveness_port}/healthz"
        if args.liveness_port
        else None,
    )
    return 0
