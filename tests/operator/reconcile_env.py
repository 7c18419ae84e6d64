"""The real Reconciler in this process against the real API server and PostgreSQL (no operator
process: a test calls each pass itself, so it can stage races between passes)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from eo_jobs.pgserver import PgServer
from eo_jobs.protocol.control import ControlStore
from eo_operator.kube import Kube
from eo_operator.metrics import PipelineMetrics
from eo_operator.reconciler import Reconciler, RetrySoon, Settings
from tests.cluster.plugin import KubeCluster

NAME = "orders"


@dataclass
class Scene:
    """One pipeline (suspended unless told), its namespace, database and Secret."""

    cluster: KubeCluster
    namespace: str
    dsn: str
    reconciler: Reconciler

    @property
    def key(self) -> str:
        return f"{self.namespace}/{NAME}"

    def apply(self, metadata: dict[str, Any] | None = None, **spec: Any) -> None:
        body: dict[str, Any] = {
            "source": {"files": {"path": "/tmp/in", "format": "json", "schema": "id BIGINT"}},
            "sinks": [
                {
                    "name": "ledger",
                    "postgres": {
                        "dsn": {"secretKeyRef": {"name": "ledger-db", "key": "dsn"}},
                        "table": "public.ledger",
                    },
                }
            ],
            "checkpoint": {"location": "/tmp/ckpt"},
            "suspend": True,
            **spec,
        }
        doc = {
            "apiVersion": "eo.dev/v1alpha1",
            "kind": "ExactlyOncePipeline",
            "metadata": {"name": NAME, "namespace": self.namespace, **(metadata or {})},
            "spec": body,
        }
        self.cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))

    def reconcile(self) -> None:
        """One pass; a RetrySoon (the operator would pass again in a second) is fine."""
        with contextlib.suppress(RetrySoon):
            self.reconciler.reconcile(self.namespace, NAME)

    def get(self) -> dict[str, Any]:
        out = self.cluster.kubectl("get", "eop", NAME, "-n", self.namespace, "-o", "json")
        return dict(json.loads(out.stdout))

    def annotation(self) -> int:
        return int(self.get()["metadata"].get("annotations", {}).get("eo.dev/epoch", "0"))

    def pods(self) -> list[str]:
        out = self.cluster.kubectl("get", "pods", "-n", self.namespace, "-o", "name")
        return out.stdout.split()

    def events(self) -> str:
        out = self.cluster.kubectl("get", "events", "-n", self.namespace, "-o", "json")
        return "\n".join(
            f"{e.get('reason')}: {e.get('message')}" for e in json.loads(out.stdout)["items"]
        )

    def control(self) -> ControlStore:
        return ControlStore(self.dsn)


@pytest.fixture
def reconcile_scene(
    crd_installed: KubeCluster, kube_namespace: str, pg_server: PgServer
) -> Iterator[Scene]:
    """A Scene whose Reconciler talks to the test control plane as admin."""
    dsn = pg_server.create_database(kube_namespace.replace("-", "_"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.ledger (id bigint)")
    crd_installed.kubectl(
        "create", "secret", "generic", "ledger-db", "-n", kube_namespace,
        f"--from-literal=dsn={dsn}",
    )  # fmt: skip
    with crd_installed.api() as api:
        reconciler = Reconciler(
            Kube(api), PipelineMetrics(CollectorRegistry()), Settings(job_image="eo-job:test")
        )
        yield Scene(crd_installed, kube_namespace, dsn, reconciler)


def stand_in(folder: Path, script: str) -> Path:
    """A folder holding an executable ``eo``: ``script`` with ``@PYTHON@`` set to this
    interpreter, for a driver pod whose PATH starts there (a stand-in driver, no JVM)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "eo"
    path.write_text(script.replace("@PYTHON@", sys.executable))
    path.chmod(0o755)
    return folder
