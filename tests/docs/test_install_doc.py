"""docs/install.md's quick start, run as written on the test control plane.

Every fenced block marked ``bash quickstart`` is run in order by bash, from the repository
root, with the real ``kubectl`` pointed at the test cluster (``KUBECONFIG``), and must succeed.
The pipeline must reach Running with its checkpoint on the claimed volume and commit the sample
events to PostgreSQL, and ``psql`` must print what the doc shows.

What cannot run here as it would on a real cluster is mapped, explicitly:

* Section 1 (build and push the images) is not run: the process kubelet does not pull or run
  images; every pod runs this checkout's installation (``eo``) or the host's tools (``sh``
  for the busybox sample pod) as a local process.
* ``export EO_DSN=...`` (an unmarked block) names the reader's database; the test checks the
  doc has that block and sets ``EO_DSN`` to a fresh database on the test PostgreSQL.
* ``helm``: the Helm CLI is not installed here. ``tests/docs/helm_shim.py`` is on ``PATH`` as
  ``helm``: ``helm install`` through Helm's own engine with the doc's arguments, plus
  ``operator.replicaCount=0`` (said on stderr); anything else is refused.
* The operator Deployment's pod (restartPolicy Always, which the process kubelet does not run)
  runs as a local process instead: the Deployment's own args and env (checked against what
  the test starts), under a token of the chart's operator ServiceAccount, on free ports.
* The default StorageClass's provisioner: the test cluster has none, so a hostPath
  PersistentVolume reserved for ``default/orders-data`` stands in for the one it would create.
  The kubelet bind-mounts it at the pods' ``/data`` (tests/cluster/podvolumes.py; root only).
* ``psql`` is the client of the test PostgreSQL's installation.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import psycopg

from eo_jobs.pgserver import PgServer
from tests.cluster.plugin import NEEDS_MOUNTS, KubeCluster
from tests.operator.cluster_env import RELEASE, SYSTEM, Operator

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "install.md"
NAMESPACE = "default"
PIPELINE = "orders-ledger"
BLOCK = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^```$", re.M | re.S)
DSN_BLOCK = re.compile(r"^export EO_DSN='postgresql://[^']+'$")

pytestmark = NEEDS_MOUNTS  # the quick start's volume is bind-mounted


def blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of every fenced block, in order."""
    return [(m["info"].strip(), m["body"]) for m in BLOCK.finditer(text)]


def quickstart(text: str) -> list[str]:
    """The bodies of the blocks the quick start runs."""
    return [body for info, body in blocks(text) if info == "bash quickstart"]


def expected_psql_output(text: str) -> str:
    """The plain block right after the last quickstart block: what its psql prints."""
    found = blocks(text)
    last = max(i for i, (info, _) in enumerate(found) if info == "bash quickstart")
    info, body = found[last + 1]
    assert info == "", "the doc shows the psql output right after the last quickstart block"
    return body


def _squash(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.strip().splitlines()]


def test_the_doc_marks_its_quick_start_and_names_the_dsn_once() -> None:
    text = DOC.read_text()
    runs = quickstart(text)
    assert len(runs) == 3, "install the chart; table, Secret, volume, input; the pipeline"
    assert "helm install eo charts/eo" in runs[0]
    assert "kubectl apply -f examples/orders-ledger.yaml" in runs[2]
    exports = [body for info, body in blocks(text) if info == "bash" and "EO_DSN=" in body]
    assert len(exports) == 1 and DSN_BLOCK.match(exports[0].strip()), exports


@contextlib.contextmanager
def _helm_on_path(tmp_path: Path) -> Iterator[Path]:
    """A folder holding ``helm``, the shim (see the module docstring)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    shim = folder / "helm"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tests.docs.helm_shim "$@"\n')
    shim.chmod(0o755)
    yield folder


def _persistent_volume(cluster: KubeCluster, host: Path) -> str:
    name = "eo-quickstart-orders-data"
    host.mkdir(parents=True, exist_ok=True)
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "hostPath": {"path": str(host), "type": "Directory"},
            "claimRef": {"namespace": NAMESPACE, "name": "orders-data"},
            "persistentVolumeReclaimPolicy": "Retain",
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pv))
    return name


def _deployment(cluster: KubeCluster) -> dict[str, Any]:
    out = cluster.kubectl("get", "deployment", f"{RELEASE}-operator", "-n", SYSTEM, "-o", "json")
    return dict(json.loads(out.stdout))


def _operator_for(cluster: KubeCluster, log_dir: Path) -> Operator:
    """The Deployment's container as a local process (args and env as the chart renders)."""
    container = _deployment(cluster)["spec"]["template"]["spec"]["containers"][0]
    args = [a for a in container["args"] if not a.startswith(("--metrics-port", "--liveness-port"))]
    # Operator.start runs `eo operator <these args>` on free ports: the same command.
    assert container.get("command") is None and args[0] == "operator"
    identity = f"{RELEASE}-operator-0"
    env: dict[str, str] = {}
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
        elif var["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[var["name"]] = SYSTEM
        elif var["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[var["name"]] = identity
        else:
            raise AssertionError(f"operator env {var} is not mapped by this test")
    assert env["EO_DRIVER_SERVICE_ACCOUNT"] == f"{RELEASE}-driver"
    kubeconfig = cluster.kubeconfig_for_service_account(SYSTEM, f"{RELEASE}-operator")
    return Operator(kubeconfig, log_dir, extra_env=env, identity=identity, args=args[1:])


def _run(block: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def _cleanup(cluster: KubeCluster, operator: Operator | None, pv: str | None) -> None:
    """Delete what the quick start made (the operator finalizes the pipeline first)."""
    if operator is not None and operator.proc is not None:
        cluster.kubectl(
            "delete", "eop", PIPELINE, "-n", NAMESPACE, "--ignore-not-found", "--timeout=180s",
            check=False,
        )  # fmt: skip
        operator.stop()
    for kind, name in (("pod", "orders-sample"), ("secret", "ledger-db"), ("pvc", "orders-data")):
        cluster.kubectl(
            "delete", kind, name, "-n", NAMESPACE, "--ignore-not-found", "--wait=false",
            check=False,
        )  # fmt: skip
    cluster.kubectl(
        "patch", "eop", PIPELINE, "-n", NAMESPACE, "--type=merge",
        "-p", '{"metadata":{"finalizers":null}}', check=False,
    )  # fmt: skip
    if pv:
        cluster.kubectl("delete", "pv", pv, "--ignore-not-found", "--wait=false", check=False)
    with (
        helm_python.Config(kubeconfig_path=cluster.kubeconfig, namespace=SYSTEM) as helm,
        contextlib.suppress(helm_python.HelmError),
    ):
        helm.uninstall(RELEASE, ignore_not_found=True, timeout=120)


def test_the_quick_start_runs_as_written_and_commits_to_postgresql(
    kube_cluster: KubeCluster, pg_server: PgServer, tmp_path: Path
) -> None:
    text = DOC.read_text()
    runs = quickstart(text)
    dsn = pg_server.create_database("quickstart")
    volume = tmp_path / "orders-data"
    operator: Operator | None = None
    pv: str | None = None
    with _helm_on_path(tmp_path) as helm_bin:
        env = {
            "PATH": os.pathsep.join(
                [
                    str(helm_bin),
                    str(pg_server.bindir),
                    str(Path(sys.executable).parent),
                    "/usr/bin:/bin",
                ]
            ),
            "HOME": str(tmp_path),
            "KUBECONFIG": str(kube_cluster.kubeconfig),
            "EO_DSN": dsn,
            "PYTHONPATH": str(REPO),
        }
        outputs: list[str] = []
        try:
            pv = _persistent_volume(kube_cluster, volume)
            for number, block in enumerate(runs, 1):
                result = _run(block, env)
                outputs.append(result.stdout)
                assert result.returncode == 0, _failure(
                    kube_cluster, number, block, result, operator
                )
                if "helm install" in block:
                    operator = _operator_for(kube_cluster, tmp_path)
                    operator.start()

            # psql, the block's last command, printed what the doc shows.
            shown = _squash(expected_psql_output(text))
            assert _squash(outputs[-1])[-len(shown) :] == shown, outputs[-1]
            with psycopg.connect(dsn) as conn:
                rows = conn.execute(
                    "SELECT order_id, merchant, amount_cents, currency FROM public.ledger "
                    "ORDER BY order_id"
                ).fetchall()
            assert rows == [
                (1, "acme", 1250, "EUR"),
                (2, "globex", 4999, "EUR"),
                (3, "acme", 300, "USD"),
            ]
            status = json.loads(
                kube_cluster.kubectl("get", "eop", PIPELINE, "-n", NAMESPACE, "-o", "json").stdout
            )["status"]
            assert status["phase"] == "Running", status
            # The input and the checkpoint sit on the claimed volume, not in the pod.
            assert (volume / "orders" / "incoming" / "orders-0001.json").exists()
            assert any((volume / "checkpoints" / PIPELINE).rglob("*")), (
                "no checkpoint on the volume"
            )
            pods = json.loads(
                kube_cluster.kubectl(
                    "get",
                    "pods",
                    "-n",
                    NAMESPACE,
                    "-l",
                    f"eo.dev/pipeline={PIPELINE}",
                    "-o",
                    "json",
                ).stdout
            )["items"]
            assert {p["spec"]["serviceAccountName"] for p in pods} == {f"{RELEASE}-driver"}
        finally:
            _cleanup(kube_cluster, operator, pv)


def _failure(
    cluster: KubeCluster,
    number: int,
    block: str,
    result: subprocess.CompletedProcess[str],
    operator: Operator | None,
) -> str:
    parts = [
        f"quickstart block {number} failed (exit {result.returncode}):\n{block}",
        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}",
    ]
    events = cluster.kubectl("get", "events", "-n", NAMESPACE, "-o", "json", check=False)
    with contextlib.suppress(ValueError):
        parts.append(
            "events:\n"
            + "\n".join(
                f"{e.get('reason')}: {e.get('message')}" for e in json.loads(events.stdout)["items"]
            )
        )
    pods = cluster.kubectl("get", "pods", "-n", NAMESPACE, "-o", "name", check=False).stdout
    for pod in pods.split():
        name = pod.split("/", 1)[1]
        with contextlib.suppress(KeyError):
            parts.append(f"--- {name}\n{cluster.kubelet.logs(NAMESPACE, name)[-3000:]}")
    if operator is not None:
        parts.append(f"operator log (tail):\n{operator.output()[-5000:]}")
    return "\n".join(parts)
