"""First-run mistakes are visible, through the real Reconciler against the real API server and
the real PostgreSQL: a missing Secret or key, a DSN that does not parse, a database that does
not answer or refuses the login, a missing driver ServiceAccount. Each gives a condition with a
reason, one Warning event with the fix, the Failed phase past restartPolicy.startTimeoutSeconds
(what EoPipelineFailed alerts on), and no secret text in status or events."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from eo_jobs.pgserver import free_port
from eo_operator.kube import Kube
from eo_operator.metrics import PipelineMetrics
from eo_operator.reconciler import Reconciler, Settings
from tests.operator.reconcile_env import Scene

pytestmark = [pytest.mark.slow]

SECRET_TEXT = "hunter2-very-secret"
TIMEOUT = 30  # the smallest restartPolicy.startTimeoutSeconds the CRD accepts


def _secret(scene: Scene, name: str, **data: str) -> None:
    literals = [f"--from-literal={k}={v}" for k, v in data.items()]
    scene.cluster.kubectl("create", "secret", "generic", name, "-n", scene.namespace, *literals)


def _sink(secret: str, key: str = "dsn") -> list[dict[str, object]]:
    return [
        {
            "name": "ledger",
            "postgres": {
                "dsn": {"secretKeyRef": {"name": secret, "key": key}},
                "table": "public.ledger",
            },
        }
    ]


def _condition(scene: Scene, kind: str) -> dict[str, str]:
    conds = (scene.get().get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == kind), {})


def _until(scene: Scene, what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, (what, scene.get().get("status"), scene.events())
        scene.reconcile()
        time.sleep(1)


def _dsn_without_role(scene: Scene) -> str:
    params = psycopg.conninfo.conninfo_to_dict(scene.dsn)
    return psycopg.conninfo.make_conninfo(
        host=str(params["host"]),
        port=str(params["port"]),
        dbname=str(params["dbname"]),
        user="nobody",
        password=SECRET_TEXT,
    )


def _unreachable(scene: Scene) -> str:
    return f"host=127.0.0.1 port={free_port()} dbname=x user=eo password={SECRET_TEXT}"


CASES = {
    # id: (secret name, its data or None for no Secret, condition reason, words of the fix)
    "secret-missing": ("absent-db", None, "SecretMissing", "kubectl -n"),
    "secret-key-missing": ("keyless-db", {"other": "x"}, "SecretKeyMissing", "add the key"),
    "dsn-unparsable": (
        "bad-db",
        {"dsn": f"host=127.0.0.1 password={SECRET_TEXT} oops"},
        "DsnInvalid",
        "libpq DSN",
    ),
    "login-refused": ("role-db", _dsn_without_role, "SinkAuthFailed", "user/password"),
    "unreachable": ("far-db", _unreachable, "SinkUnreachable", "host, port and dbname"),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_a_sink_mistake_gets_a_condition_a_warning_with_the_fix_then_failed(
    reconcile_scene: Scene, case: str
) -> None:
    scene = reconcile_scene
    secret, data, reason, fix = CASES[case]
    if data is not None:
        value = data if isinstance(data, dict) else {"dsn": data(scene)}
        _secret(scene, str(secret), **value)
    scene.apply(
        suspend=False,
        sinks=_sink(str(secret)),
        restartPolicy={"startTimeoutSeconds": TIMEOUT},
    )
    _until(scene, reason, lambda: _condition(scene, "SinkReachable").get("reason") == reason, 60)
    status = scene.get()["status"]
    assert _condition(scene, "SinkReachable")["status"] == "False"
    assert status["phase"] == "Starting" and status["message"].startswith(f"{reason}: ")
    assert status["restarts"] == 0 and scene.pods() == []
    warnings = [line for line in scene.events().splitlines() if line.startswith(f"{reason}:")]
    assert len(warnings) == 1 and "Fix:" in warnings[0] and fix in warnings[0], warnings

    _until(scene, "Failed", lambda: scene.get()["status"]["phase"] == "Failed", TIMEOUT + 60)
    status = scene.get()["status"]
    assert status["reason"] == reason and "retrying" in status["message"]
    assert scene.pods() == []
    everything = json.dumps(scene.get()) + scene.events()
    assert SECRET_TEXT not in everything and "oops" not in everything


def test_a_created_secret_ends_the_block_and_the_pipeline_starts(reconcile_scene: Scene) -> None:
    scene = reconcile_scene
    scene.apply(suspend=False, sinks=_sink("later-db"))
    _until(
        scene,
        "blocked",
        lambda: _condition(scene, "SinkReachable").get("reason") == "SecretMissing",
        60,
    )
    _secret(scene, "later-db", dsn=scene.dsn)
    _until(scene, "a driver pod", lambda: bool(scene.pods()), 60)
    assert _condition(scene, "SinkReachable")["status"] == "True"
    assert scene.get()["status"]["reason"] != "SecretMissing"
    assert scene.control().fence_epoch(scene.key) == 1


def test_a_missing_driver_service_account_is_named_with_the_fix(reconcile_scene: Scene) -> None:
    scene = reconcile_scene
    scene.apply(suspend=False, driver={"serviceAccount": "no-such-account"})
    _until(
        scene,
        "ServiceAccountMissing",
        lambda: _condition(scene, "DriverCreatable").get("reason") == "ServiceAccountMissing",
        60,
    )
    cond = _condition(scene, "DriverCreatable")
    assert cond["status"] == "False" and "no-such-account" in cond["message"]
    assert scene.get()["status"]["message"].startswith("ServiceAccountMissing: ")
    assert scene.get()["status"]["restarts"] == 0
    assert "ServiceAccountMissing:" in scene.events() and "create the ServiceAccount" in (
        scene.events()
    )


def test_a_refused_pod_create_is_named_with_the_fix(reconcile_scene: Scene) -> None:
    # The operator's identity may do everything it needs in the namespace but create pods (as
    # when the namespace is missing from the chart's watched ones, or a policy refuses).
    scene = reconcile_scene
    ns = ["-n", scene.namespace]
    scene.cluster.kubectl("create", "serviceaccount", "limited", *ns)
    scene.cluster.kubectl(
        "create", "role", "all-but-pods", "--verb=*",
        "--resource=exactlyoncepipelines.eo.dev,exactlyoncepipelines.eo.dev/status,"
        "secrets,events,configmaps,services", *ns,
    )  # fmt: skip
    scene.cluster.kubectl(
        "create", "role", "see-pods", "--verb=get,list,watch,delete", "--resource=pods", *ns
    )
    for role in ("all-but-pods", "see-pods"):
        scene.cluster.kubectl(
            "create", "rolebinding", role, f"--role={role}",
            f"--serviceaccount={scene.namespace}:limited", *ns,
        )  # fmt: skip
    token = scene.cluster.service_account_token(scene.namespace, "limited")
    with scene.cluster.api(token) as api:
        limited = replace(
            scene,
            reconciler=Reconciler(
                Kube(api), PipelineMetrics(CollectorRegistry()), Settings(job_image="eo-job:t")
            ),
        )
        limited.apply(suspend=False)
        _until(
            limited,
            "PodForbidden",
            lambda: _condition(limited, "DriverCreatable").get("reason") == "PodForbidden",
            60,
        )
        # Review operator-2 N9: the retries spend no epoch, raise no fence, say no Recovered.
        epoch, recovered = scene.annotation(), scene.events().count("Recovered:")
        for _ in range(3):
            limited.reconcile()
        assert scene.annotation() == epoch
        assert scene.events().count("Recovered:") == recovered <= 1
        assert scene.get()["status"]["epoch"] == epoch
    cond = _condition(scene, "DriverCreatable")
    assert cond["status"] == "False" and "system:serviceaccount" in cond["message"]
    assert "PodForbidden:" in scene.events() and "grant the operator" in scene.events()
    assert scene.get()["status"]["restarts"] == 0


def test_a_suspend_whose_recovery_fails_keeps_retrying_and_says_so(reconcile_scene: Scene) -> None:
    scene = reconcile_scene
    scene.apply(sinks=_sink("later-db"))  # suspended
    for _ in range(3):
        scene.reconcile()
    status = scene.get()["status"]
    assert status["phase"] == "Suspended"
    assert "retrying" in status["message"] and "resolved" not in status["message"]
    assert _condition(scene, "SinkReachable").get("reason") == "SecretMissing"
    assert status.get("recoveredEpoch") is None and scene.pods() == []
    _secret(scene, "later-db", dsn=scene.dsn)
    _until(scene, "recovered", lambda: scene.get()["status"].get("recoveredEpoch") == 1, 60)
    scene.reconcile()
    status = scene.get()["status"]
    assert status["phase"] == "Suspended" and "resolved" in status["message"]
    assert _condition(scene, "SinkReachable")["status"] == "True"
    assert scene.pods() == [] and scene.control().fence_epoch(scene.key) == 1
