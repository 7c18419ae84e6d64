"""First-run mistakes on a real control plane with the operator running as the chart installs
it: a missing Secret, a login the database refuses and a missing driver ServiceAccount each
show a condition, a Warning event with the fix and, past startTimeoutSeconds, phase Failed;
fixing the cause starts the pipeline without a spec edit."""

from __future__ import annotations

import json

import psycopg
import pytest

from tests.operator.cluster_env import Scene

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SECRET_TEXT = "hunter2-very-secret"


def _sink(secret: str) -> list[dict[str, object]]:
    return [
        {
            "name": "orders",
            "postgres": {
                "dsn": {"secretKeyRef": {"name": secret, "key": "dsn"}},
                "table": "public.orders",
                "writerPartitions": 2,
            },
        }
    ]


def _condition(scene: Scene, kind: str) -> dict[str, str]:
    return next((c for c in scene.status().get("conditions") or [] if c["type"] == kind), {})


def _secret(scene: Scene, name: str, dsn: str) -> None:
    scene.cluster.kubectl(
        "create", "secret", "generic", name, "-n", scene.namespace, f"--from-literal=dsn={dsn}"
    )


def _blocked_then_failed(scene: Scene, kind: str, reason: str, fix: str) -> None:
    scene.until(reason, lambda: _condition(scene, kind).get("reason") == reason)
    assert _condition(scene, kind)["status"] == "False"
    assert f"{reason}:" in scene.events() and fix in scene.events()
    scene.until("Failed", lambda: scene.status().get("phase") == "Failed", timeout=180)
    status = scene.status()
    assert status["reason"] == reason and status["restarts"] == 0
    assert SECRET_TEXT not in json.dumps(scene.get()) + scene.events()


def test_a_missing_secret_then_a_refused_login_fail_visibly_and_the_fix_starts_it(
    scene: Scene,
) -> None:
    scene.add_files(2)
    scene.apply(sinks=_sink("late-db"), restartPolicy={"startTimeoutSeconds": 30})
    _blocked_then_failed(scene, "SinkReachable", "SecretMissing", "create secret generic late-db")
    params = psycopg.conninfo.conninfo_to_dict(scene.dsn)
    refused = psycopg.conninfo.make_conninfo(
        host=str(params["host"]),
        port=str(params["port"]),
        dbname=str(params["dbname"]),
        user="nobody",
        password=SECRET_TEXT,
    )
    _secret(scene, "late-db", refused)
    _blocked_then_failed(scene, "SinkReachable", "SinkAuthFailed", "user/password")
    scene.cluster.kubectl("delete", "secret", "late-db", "-n", scene.namespace)
    _secret(scene, "late-db", scene.dsn)
    scene.until("phase Running", lambda: scene.status().get("phase") == "Running")
    scene.until("all records delivered", scene.all_delivered)
    assert _condition(scene, "SinkReachable")["status"] == "True"
    audit = scene.audit()
    assert (audit.duplicates, audit.missing, audit.prepared_left) == (0, 0, 0)


def test_a_missing_driver_service_account_fails_visibly(scene: Scene) -> None:
    scene.apply(
        driver={"cores": 1, "memory": "768m", "serviceAccount": "no-such-account"},
        restartPolicy={"startTimeoutSeconds": 30},
    )
    _blocked_then_failed(
        scene, "DriverCreatable", "ServiceAccountMissing", "create the ServiceAccount"
    )
    assert scene.pods() == []
