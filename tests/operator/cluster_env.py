"""The real operator against the real control plane, under the chart's ServiceAccount.

The chart is installed with Helm's own engine (replicaCount 0: the process kubelet runs only
restartPolicy Never pods), then ``eo operator`` runs as a local process with a token of the
chart's operator ServiceAccount, so every API call it makes is judged by the chart's RBAC.
Pipelines are applied with ``kubectl apply -f`` as users do; driver pods run ``eo run`` as
local processes, against a real PostgreSQL.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helm_python
import psycopg

from bench import fast_jvm
from eo_jobs.pgserver import free_port
from eo_jobs.protocol.gid import pipeline_prefix
from tests.chart.helm import CHART, set_values
from tests.cluster.plugin import KubeCluster
from tests.runtime import harness

REPO = Path(__file__).resolve().parents[2]
RELEASE = "eo"
SYSTEM = "eo-system"
LEASE = f"{RELEASE}-operator"
"""The chart's default leader-election Lease (in the release namespace)."""


def lease_args(lease: float = 15, renew: float = 10, retry: float = 2) -> list[str]:
    """``eo operator``'s leader-election options as the chart renders them (its defaults)."""
    return [
        f"--leader-election={LEASE}",
        f"--lease-duration={lease:g}",
        f"--renew-deadline={renew:g}",
        f"--retry-period={retry:g}",
    ]


@dataclass
class Operator:
    """An ``eo operator`` process that can be stopped, crashed and restarted.

    It runs with the chart's arguments (leader election on the chart's Lease) and environment
    (``POD_NAMESPACE``, ``POD_NAME`` = ``identity``: a restart keeps its pod's name, as a
    container restarted in its pod does).
    """

    kubeconfig: Path
    log_dir: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    identity: str = "eo-operator-0"
    args: list[str] = field(default_factory=lease_args)
    proc: subprocess.Popen[bytes] | None = None
    metrics_port: int = 0
    logs: list[Path] = field(default_factory=list)

    def start(self, **env: str) -> None:
        """Start (again), with optional extra environment (e.g. a fault switch)."""
        self.metrics_port = free_port()
        log = self.log_dir / f"{self.identity}-{len(self.logs)}.log"
        self.logs.append(log)
        environ = {k: v for k, v in os.environ.items() if not k.startswith("EO_")}
        environ.update(
            {
                "KUBECONFIG": str(self.kubeconfig),
                "EO_JOB_IMAGE": "eo-job:test",
                "EO_LOG_LEVEL": "INFO",
                "POD_NAMESPACE": SYSTEM,
                "POD_NAME": self.identity,
                **self.extra_env,
                **env,
            }
        )
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "eo_jobs.cli",
                    "operator",
                    *self.args,
                    "--metrics-port",
                    str(self.metrics_port),
                    "--liveness-port",
                    str(free_port()),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=environ,
                cwd=REPO,
                start_new_session=True,
            )

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        """Stop it and wait; returns its exit code."""
        if self.proc is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(10)

    def output(self) -> str:
        """Every log line of every run so far."""
        return "\n".join(p.read_text(errors="replace") for p in self.logs if p.exists())


@dataclass
class Scene:
    """One pipeline in its own namespace, its database and its input folder."""

    cluster: KubeCluster
    operator: Operator
    namespace: str
    dsn: str
    work: Path
    name: str = "orders"
    truth: harness.Truth = field(default_factory=harness.Truth)
    next_file: int = 0

    def add_files(self, files: int, per_file: int = 40) -> None:
        """Drop more input (ids continue where the last batch of files stopped)."""
        start = 100_000 * (self.next_file + 1)
        more = harness.write_files(self.work / "in", files=files, per_file=per_file, start=start)
        self.truth.valid.update(more.valid)
        self.truth.malformed += more.malformed
        self.next_file += 1

    def apply(self, **overrides: Any) -> None:
        """``kubectl apply -f`` the pipeline (as a user would)."""
        self.cluster.kubectl("apply", "-f", "-", input=pipeline_yaml(self, **overrides))

    def get(self) -> dict[str, Any]:
        """The pipeline object."""
        out = self.cluster.kubectl("get", "eop", self.name, "-n", self.namespace, "-o", "json")
        return dict(json.loads(out.stdout))

    def status(self) -> dict[str, Any]:
        """The pipeline's status."""
        return dict(self.get().get("status") or {})

    def pods(self) -> list[dict[str, Any]]:
        """Driver pods of the pipeline."""
        out = self.cluster.kubectl(
            "get", "pods", "-n", self.namespace, "-l", f"eo.dev/pipeline={self.name}", "-o", "json"
        )
        return list(json.loads(out.stdout)["items"])

    def running_driver(self) -> dict[str, Any] | None:
        """The driver pod in phase Running, if any."""
        for pod in self.pods():
            if (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get(
                "deletionTimestamp"
            ):
                return pod
        return None

    def events(self) -> str:
        """Reasons and messages of the pipeline's events."""
        out = self.cluster.kubectl("get", "events", "-n", self.namespace, "-o", "json")
        return "\n".join(
            f"{e.get('reason')}: {e.get('message')}" for e in json.loads(out.stdout)["items"]
        )

    def until(self, what: str, check: Callable[[], Any], timeout: float = 240) -> Any:
        """Poll ``check`` until it is truthy; fail with the operator log and status."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(subprocess.CalledProcessError, OSError, RuntimeError):
                value = check()
                if value:
                    return value
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out waiting for {what}\nstatus: {self.status()}\n"
                    f"events:\n{self.events()}\noperator log (tail):\n"
                    f"{self.operator.output()[-6000:]}\ndriver logs:\n{self.driver_logs()}"
                )
            time.sleep(1)

    def driver_logs(self) -> str:
        """Tails of the driver pods' logs."""
        parts = []
        for pod in self.pods():
            with contextlib.suppress(KeyError):
                name = pod["metadata"]["name"]
                kubelet = self.cluster.kubelet_on(pod["spec"].get("nodeName") or "")
                parts.append(f"--- {name}\n" + kubelet.logs(self.namespace, name)[-3000:])
        return "\n".join(parts)

    def rows(self) -> int:
        """Rows in the sink table."""
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute("SELECT count(*) FROM public.orders").fetchone()
        return int(row[0]) if row else -1

    def audit(self) -> harness.Audit:
        """Sink vs source (prepared transactions of this pipeline counted too)."""
        result = harness.audit(self.dsn, self.truth)
        with psycopg.connect(self.dsn) as conn:
            left = conn.execute(
                "SELECT count(*) FROM pg_prepared_xacts WHERE starts_with(gid, %s)",
                (pipeline_prefix(f"{self.namespace}/{self.name}"),),
            ).fetchone()
        return harness.Audit(
            result.rows,
            result.duplicates,
            result.missing,
            result.unexpected,
            result.wrong_amounts,
            result.dead_letters,
            int(left[0]) if left else -1,
        )

    def all_delivered(self) -> bool:
        """Every valid record is in the sink (used to wait for the end of the input)."""
        return self.rows() >= len(self.truth.valid)


def pipeline_yaml(scene: Scene, **overrides: Any) -> str:
    """The pipeline manifest for a scene."""
    spec: dict[str, Any] = {
        "source": {
            "files": {
                "path": str(scene.work / "in"),
                "format": "json",
                "schema": "order_id BIGINT, merchant STRING, amount_cents BIGINT",
                "maxFilesPerTrigger": 2,
            }
        },
        "sinks": [
            {
                "name": "orders",
                "postgres": {
                    "dsn": {"secretKeyRef": {"name": "orders-db", "key": "dsn"}},
                    "table": "public.orders",
                    "writerPartitions": 2,
                },
            }
        ],
        "checkpoint": {"location": str(scene.work / "checkpoint"), "triggerIntervalSeconds": 1},
        "driver": {"cores": 1, "memory": "768m"},
        "restartPolicy": {"maxRestarts": 5, "backoffSeconds": 1, "maxBackoffSeconds": 5},
        # Short-lived test drivers start faster on the C1 compiler and a class archive.
        "sparkConf": {"spark.driver.extraJavaOptions": fast_jvm.java_options()},
    }
    spec.update(overrides)
    doc = {
        "apiVersion": "eo.dev/v1alpha1",
        "kind": "ExactlyOncePipeline",
        "metadata": {"name": scene.name, "namespace": scene.namespace},
        "spec": spec,
    }
    return json.dumps(doc)


def wait_crd_established(cluster: KubeCluster, timeout: float = 60) -> None:
    """Until the CRD says Established. Not ``kubectl wait``: on a CRD created a moment ago (a
    module before deleted it) its status has no conditions yet, and ``kubectl wait`` fails at
    once (".status.conditions accessor error: <nil>") instead of waiting."""
    deadline = time.monotonic() + timeout
    path = '{.status.conditions[?(@.type=="Established")].status}'
    while True:
        said = cluster.kubectl(
            "get", "crd", "exactlyoncepipelines.eo.dev", "-o", f"jsonpath={path}", check=False
        )
        if said.returncode == 0 and said.stdout.strip() == "True":
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the CRD is not Established after {timeout:.0f} s: {said.stderr}")
        time.sleep(0.2)


@contextlib.contextmanager
def installed_operator(
    cluster: KubeCluster, log_dir: Path, *, chart_values: tuple[str, ...] = (), **env: str
) -> Iterator[Operator]:
    """Install the chart (CRDs, RBAC) with Helm's engine and run the operator as its SA, with
    ``env`` added to its environment (settings the chart passes as values). ``chart_values``
    are more ``--set`` expressions, e.g. ``driver.namespaces={ns}`` for the driver's RBAC
    (those namespaces must exist first)."""
    with helm_python.Config(kubeconfig_path=cluster.kubeconfig, namespace=SYSTEM) as helm:
        values = set_values("operator.replicaCount=0", *chart_values)
        helm.install(
            str(CHART), RELEASE, values, namespace=SYSTEM, create_namespace=True, timeout=120
        )
        try:
            wait_crd_established(cluster)
            kubeconfig = cluster.kubeconfig_for_service_account(SYSTEM, f"{RELEASE}-operator")
            operator = Operator(kubeconfig, log_dir, extra_env=env)
            operator.start()
            try:
                yield operator
            finally:
                operator.stop()
        finally:
            with contextlib.suppress(helm_python.HelmError):
                helm.uninstall(RELEASE, ignore_not_found=True, timeout=120)


def _api(base: str, path: str) -> Any:
    with urllib.request.urlopen(f"{base}{path}", timeout=5) as response:
        return json.loads(response.read())["data"]


def query(base: str, expr: str) -> list[dict[str, Any]]:
    """An instant query's result vector."""
    return list(_api(base, "/api/v1/query?query=" + urllib.parse.quote(expr))["result"])


def alerts(base: str) -> list[dict[str, Any]]:
    """Active (pending or firing) alerts."""
    return list(_api(base, "/api/v1/alerts")["alerts"])


def make_scene(
    cluster: KubeCluster, operator: Operator, namespace: str, dsn: str, work: Path
) -> Scene:
    """Table, Secret and input folder for one pipeline."""
    harness.create_table(dsn)
    cluster.kubectl(
        "create", "secret", "generic", "orders-db", "-n", namespace, f"--from-literal=dsn={dsn}"
    )
    (work / "in").mkdir(parents=True, exist_ok=True)
    return Scene(cluster, operator, namespace, dsn, work)
