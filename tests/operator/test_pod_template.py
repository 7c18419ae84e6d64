"""The driver pod eo builds, with a user's template laid over it: the template adds, eo keeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from eo_jobs.spec import parse_pipeline
from eo_operator.resources import driver_pod

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "orders-ledger.yaml"
TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "payments"}, "annotations": {"owner": "ledger"}},
    "spec": {
        "nodeSelector": {"pool": "spark"},
        "tolerations": [{"key": "spark", "operator": "Exists", "effect": "NoSchedule"}],
        "volumes": [{"name": "certs", "secret": {"secretName": "ca"}}],
        "containers": [
            {
                "name": "driver",
                "env": [{"name": "TZ", "value": "UTC"}],
                "volumeMounts": [{"name": "certs", "mountPath": "/etc/certs"}],
                "resources": {"limits": {"memory": "3Gi"}},
            },
            {"name": "log-shipper", "image": "fluent-bit:3"},
        ],
        "securityContext": {"supplementalGroups": [2000]},
    },
}


def _pod(template: dict[str, Any] | None) -> dict[str, Any]:
    doc = yaml.safe_load(EXAMPLE.read_text())
    if template is not None:
        doc["spec"].setdefault("driver", {})["podTemplate"] = template
    owner = {"metadata": {"name": "orders-ledger", "uid": "u-1"}}
    return driver_pod(parse_pipeline(doc), owner, 4, "eo-job:test", "eo-driver")


def test_the_template_adds_scheduling_volumes_a_sidecar_and_driver_settings() -> None:
    plain, shaped = _pod(None), _pod(TEMPLATE)
    meta, spec = shaped["metadata"], shaped["spec"]
    driver, sidecar = spec["containers"]

    assert meta["labels"]["team"] == "payments" and meta["annotations"]["owner"] == "ledger"
    assert spec["nodeSelector"] == {"pool": "spark"}
    assert spec["tolerations"][-1]["key"] == "spark"
    assert spec["tolerations"][:-1] == plain["spec"]["tolerations"]
    names = [v["name"] for v in spec["volumes"]]
    assert names[0] == "tmp" and names[-1] == "certs"
    assert sidecar == {"name": "log-shipper", "image": "fluent-bit:3"}
    assert {"name": "TZ", "value": "UTC"} in driver["env"]
    assert {"name": "certs", "mountPath": "/etc/certs"} in driver["volumeMounts"]
    assert driver["resources"]["limits"]["memory"] == "3Gi"
    assert (
        driver["resources"]["requests"] == plain["spec"]["containers"][0]["resources"]["requests"]
    )
    assert spec["securityContext"]["supplementalGroups"] == [2000]


def test_what_eo_owns_stays_as_eo_built_it() -> None:
    plain, shaped = _pod(None), _pod(TEMPLATE)
    driver, own = shaped["spec"]["containers"][0], plain["spec"]["containers"][0]

    for key in ("image", "args", "ports", "securityContext"):
        assert driver[key] == own[key], key
    assert "command" not in driver  # the image's entrypoint runs the args
    assert driver["env"][: len(own["env"])] == own["env"]
    for key, value in plain["metadata"]["labels"].items():
        if key != "eo.dev/spec-hash":  # the template is part of the spec: a new hash
            assert shaped["metadata"]["labels"][key] == value
    assert shaped["spec"]["securityContext"]["runAsNonRoot"] is True
    assert shaped["spec"]["restartPolicy"] == "Never"
    assert shaped["spec"]["serviceAccountName"] == "eo-driver"


def test_a_driver_tolerates_a_node_that_is_not_ready_for_the_node_lost_grace_not_300s() -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    owner = {"metadata": {"name": "orders-ledger", "uid": "u-1"}}
    pod = driver_pod(parse_pipeline(doc), owner, 4, "eo-job:test", "eo-driver", 45)
    assert pod["spec"]["tolerations"] == [
        {
            "key": f"node.kubernetes.io/{taint}",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 45,
        }
        for taint in ("unreachable", "not-ready")
    ]


def test_a_driver_runs_the_images_entrypoint_as_the_image_user_by_default() -> None:
    spec = _pod(None)["spec"]
    (driver,) = spec["containers"]
    # No command: tini and docker/entrypoint.sh run `eo run --epoch 4` (they give a UID
    # without a passwd entry its name, and reap orphaned Python workers).
    assert "command" not in driver
    assert driver["args"] == ["run", "--epoch", "4"]
    assert spec["securityContext"]["runAsUser"] == 10001
    assert spec["securityContext"]["fsGroup"] == 10001
    assert "EO_PLATFORM_ASSIGNS_UID" not in {e["name"] for e in driver["env"]}


def test_where_the_platform_assigns_uids_the_driver_names_none_and_tells_its_executors() -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    owner = {"metadata": {"name": "orders-ledger", "uid": "u-1"}}
    pod = driver_pod(
        parse_pipeline(doc), owner, 4, "eo-job:test", "eo-driver", platform_assigns_uid=True
    )
    spec = pod["spec"]
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (driver,) = spec["containers"]
    assert driver["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e.get("value") for e in driver["env"]}
    assert env["EO_PLATFORM_ASSIGNS_UID"] == "true"
