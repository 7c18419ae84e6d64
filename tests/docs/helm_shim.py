"""``helm`` for the install-doc test, where the Helm CLI is not installed: Helm's own engine.

Runs ``helm install RELEASE CHART [--namespace NS] [--create-namespace] [--set EXPR]...``
through helm-python-sdk (Helm's Go library, as tests/chart does): the same chart, the same
``--set`` parser (strvals), the same schema validation and install against the API server in
``$KUBECONFIG``. One value is added, and said so on stderr: ``operator.replicaCount=0``, since
the process kubelet runs only restartPolicy: Never pods; the test runs the Deployment's
container as a local process instead. Any other subcommand or flag is refused (exit 2), so a
doc that starts using one fails the test instead of being half-run.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import helm_python

from tests.chart.helm import set_values

ADDED = "operator.replicaCount=0"


def main(argv: Sequence[str] | None = None) -> int:
    """``helm install`` with Helm's engine; other commands are refused."""
    parser = argparse.ArgumentParser(prog="helm (install-doc test shim)")
    sub = parser.add_subparsers(dest="command", required=True)
    install = sub.add_parser("install")
    install.add_argument("release")
    install.add_argument("chart")
    install.add_argument("--namespace", "-n", default="default")
    install.add_argument("--create-namespace", action="store_true")
    install.add_argument("--set", action="append", default=[], dest="sets")
    args = parser.parse_args(argv)
    print(f"helm (test shim): installing with Helm's engine, adding --set {ADDED}", file=sys.stderr)
    values = set_values(*args.sets, ADDED)
    with helm_python.Config(
        kubeconfig_path=os.environ["KUBECONFIG"], namespace=args.namespace
    ) as helm:
        helm.install(
            args.chart,
            args.release,
            values,
            namespace=args.namespace,
            create_namespace=args.create_namespace,
            timeout=120,
        )
    print(f"NAME: {args.release}\nNAMESPACE: {args.namespace}\nSTATUS: deployed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
