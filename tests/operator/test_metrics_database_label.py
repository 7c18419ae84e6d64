"""``eo_sink_prepared_transactions`` carries the sink's server as ``database``, through the real
reconcile pass (real API server, real Secret, real PostgreSQL, the operator's own registry).

max_prepared_transactions and pg_prepared_xacts are server-wide, so every pipeline on a server
reports the same pair; EoPreparedTransactionsNearLimit groups by this label to page once per
server. The label is ``host:port`` from the Secret's DSN: never the user or the password.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlsplit

import pytest
from prometheus_client import CollectorRegistry

from eo_operator.metrics import PipelineHealth, PipelineMetrics, SinkHealth
from eo_operator.sinks import database_label
from tests.operator.reconcile_env import NAME, Scene

SECOND = "refunds"


def _pipeline(namespace: str, name: str, secret: str) -> str:
    return json.dumps(
        {
            "apiVersion": "eo.dev/v1alpha1",
            "kind": "ExactlyOncePipeline",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "source": {"files": {"path": "/tmp/in", "format": "json", "schema": "id BIGINT"}},
                "sinks": [
                    {
                        "name": "ledger",
                        "postgres": {
                            "dsn": {"secretKeyRef": {"name": secret, "key": "dsn"}},
                            "table": "public.ledger",
                        },
                    }
                ],
                "checkpoint": {"location": "/tmp/ckpt"},
                "suspend": True,
            },
        }
    )


def _samples(scene: Scene, metric: str) -> list[dict[str, Any]]:
    found = []
    for family in scene.reconciler.metrics.registry.collect():
        for sample in family.samples:
            if sample.name == metric and sample.labels.get("namespace") == scene.namespace:
                found.append({**sample.labels, "value": sample.value})
    return found


def test_two_pipelines_on_one_server_export_the_same_database_label_without_credentials(
    reconcile_scene: Scene,
) -> None:
    scene = reconcile_scene
    scene.reconciler.settings.health_interval = 0.0
    where = urlsplit(scene.dsn)
    # The second pipeline logs in with a password (trust auth here ignores it): it must not
    # reach the label, and the same server must get the same label whatever the credentials.
    with_password = scene.dsn.replace(f"{where.username}@", f"{where.username}:pw-s3cret@")
    scene.cluster.kubectl(
        "create", "secret", "generic", "refunds-db", "-n", scene.namespace,
        f"--from-literal=dsn={with_password}",
    )  # fmt: skip
    scene.apply()
    scene.cluster.kubectl(
        "apply", "-f", "-", input=_pipeline(scene.namespace, SECOND, "refunds-db")
    )

    deadline = time.monotonic() + 120
    while True:
        scene.reconcile()
        scene.reconciler.reconcile(scene.namespace, SECOND)
        prepared = _samples(scene, "eo_sink_prepared_transactions")
        if {s["pipeline"] for s in prepared} == {NAME, SECOND}:
            break
        assert time.monotonic() < deadline, f"sink series never appeared: {prepared}"
        time.sleep(0.5)

    server = f"{where.hostname}:{where.port}"
    assert {s["database"] for s in prepared} == {server}, prepared
    limits = _samples(scene, "eo_sink_max_prepared_transactions")
    assert {(s["pipeline"], s["database"]) for s in limits} == {(NAME, server), (SECOND, server)}
    exposition = scene.reconciler.metrics.exposition().decode()
    assert "pw-s3cret" not in exposition


@pytest.mark.parametrize(
    ("dsn", "label"),
    [
        ("postgresql://eo:secret@db.shop.svc:6432/ledger?sslmode=require", "db.shop.svc:6432"),
        ("postgresql://eo@db.shop.svc/ledger", "db.shop.svc:5432"),
        ("host=10.0.0.7 port=5433 dbname=ledger user=eo password=secret", "10.0.0.7:5433"),
        ("hostaddr=10.0.0.8 dbname=ledger password=secret", "10.0.0.8:5432"),
        ("dbname=ledger", "localhost:5432"),
        ("mysql://eo:secret@mysql.shop.svc:3307/ledger", "mysql.shop.svc:3307"),
        ("mariadb://eo@mariadb.shop.svc/ledger", "mariadb.shop.svc:3306"),
    ],
)
def test_the_label_is_the_server_of_the_dsn_in_either_syntax(dsn: str, label: str) -> None:
    assert database_label(dsn) == label


def test_a_sink_whose_dsn_moves_to_another_server_keeps_one_series() -> None:
    metrics = PipelineMetrics(CollectorRegistry())

    def observe(database: str) -> None:
        metrics.observe_health(
            "shop",
            "orders",
            PipelineHealth(
                guarantee="exactly-once",
                epoch=1,
                phase="Running",
                driver_up=True,
                restarts=0,
                batches=0,
                failures=0,
                failure_rate=0.0,
                trigger_interval_seconds=10,
                sinks={"ledger": SinkHealth(3, 64, database)},
            ),
        )

    observe("old-db:5432")
    observe("new-db:5432")
    series = [
        sample.labels["database"]
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == "eo_sink_prepared_transactions"
    ]
    assert series == ["new-db:5432"]
