"""The operator pod is shaped by values: images, scheduling, security contexts, extra env."""

from __future__ import annotations

from typing import Any

import helm_python
import pytest

from tests.chart.helm import find, pod_specs, render, set_values

DIGEST = "sha256:" + "ab" * 32


def _pod(*expressions: str, values: dict[str, Any] | None = None) -> dict[str, Any]:
    merged = set_values(*expressions) if values is None else values
    deployment = find(render(merged), "Deployment", "eo-operator")
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def _env(spec: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item for item in spec["containers"][0]["env"]}


def test_an_image_digest_wins_over_the_tag_for_the_operator_and_the_job_image() -> None:
    spec = _pod(
        f"operator.image.digest={DIGEST}",
        "operator.image.tag=9.9.9",
        f"driver.image.digest={DIGEST}",
    )
    assert spec["containers"][0]["image"] == f"eo-operator@{DIGEST}"
    assert _env(spec)["EO_JOB_IMAGE"]["value"] == f"eo-job@{DIGEST}"


def test_a_malformed_digest_is_refused_by_the_schema() -> None:
    with pytest.raises(helm_python.HelmValuesError, match="/operator/image/digest"):
        render(set_values("operator.image.digest=latest"))


def test_a_global_registry_prefixes_both_images() -> None:
    spec = _pod("global.imageRegistry=mirror.example:5000")
    assert spec["containers"][0]["image"] == "mirror.example:5000/eo-operator:0.1.0"
    assert _env(spec)["EO_JOB_IMAGE"]["value"] == "mirror.example:5000/eo-job:0.1.0"


def test_global_and_chart_pull_secrets_both_reach_the_pods_and_both_service_accounts() -> None:
    objects = render(
        set_values("global.imagePullSecrets[0].name=umbrella", "imagePullSecrets[0].name=own")
    )
    expected = [{"name": "umbrella"}, {"name": "own"}]
    [(_, spec)] = list(pod_specs(objects))
    assert spec["imagePullSecrets"] == expected
    for account in ("eo-operator", "eo-driver"):
        assert find(objects, "ServiceAccount", account)["imagePullSecrets"] == expected


def test_global_pull_secrets_may_be_plain_names_as_umbrella_charts_often_give_them() -> None:
    spec = _pod("global.imagePullSecrets={umbrella}")
    assert spec["imagePullSecrets"] == [{"name": "umbrella"}]


def test_affinity_replaces_the_default_anti_affinity_and_scheduling_values_reach_the_pod() -> None:
    spec = _pod(
        "operator.replicaCount=2",
        "operator.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].key=pool",
        "operator.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
        "operator.nodeSelector.pool=system",
        "operator.tolerations[0].key=dedicated",
        "operator.tolerations[0].operator=Exists",
    )
    assert set(spec["affinity"]) == {"nodeAffinity"}
    assert spec["nodeSelector"] == {"pool": "system"}
    assert spec["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]


def test_extra_env_is_appended_after_the_env_the_chart_sets() -> None:
    spec = _pod(
        "operator.extraEnv[0].name=EO_LOG_LEVEL",
        "operator.extraEnv[0].value=DEBUG",
        "operator.extraEnv[1].name=TOKEN",
        "operator.extraEnv[1].valueFrom.secretKeyRef.name=s",
        "operator.extraEnv[1].valueFrom.secretKeyRef.key=k",
    )
    names = [item["name"] for item in spec["containers"][0]["env"]]
    assert names[-2:] == ["EO_LOG_LEVEL", "TOKEN"]
    assert _env(spec)["EO_LOG_LEVEL"]["value"] == "DEBUG"
    assert _env(spec)["TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "s", "key": "k"}}


def test_an_extra_env_entry_may_not_replace_what_the_chart_sets() -> None:
    with pytest.raises(helm_python.HelmRenderError, match=r"operator.extraEnv\[0\]: EO_JOB_IMAGE"):
        render(set_values("operator.extraEnv[0].name=EO_JOB_IMAGE", "operator.extraEnv[0].value=x"))


def test_security_contexts_are_values_and_a_user_may_tighten_them() -> None:
    spec = _pod(
        "operator.podSecurityContext.runAsUser=20000",
        "operator.podSecurityContext.supplementalGroups={5}",
        "operator.securityContext.runAsUser=20000",
    )
    assert spec["securityContext"]["runAsUser"] == 20000
    assert spec["securityContext"]["supplementalGroups"] == [5]
    assert spec["containers"][0]["securityContext"]["runAsUser"] == 20000
    assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def _uids(spec: dict[str, Any]) -> dict[str, object]:
    found: dict[str, object] = {}
    contexts = {
        "pod": spec["securityContext"],
        "container": spec["containers"][0]["securityContext"],
    }
    for where, context in contexts.items():
        for key in ("runAsUser", "runAsGroup", "fsGroup"):
            if key in context:
                found[f"{where}.{key}"] = context[key]
    return found


def test_on_openshift_the_platform_assigns_uid_gid_and_fs_group() -> None:
    spec = _pod("openshift=true")
    assert _uids(spec) == {}
    assert spec["securityContext"]["runAsNonRoot"] is True
    container = spec["containers"][0]["securityContext"]
    assert container["allowPrivilegeEscalation"] is False
    assert container["capabilities"] == {"drop": ["ALL"]}
    assert container["seccompProfile"] == {"type": "RuntimeDefault"}


def test_on_openshift_the_operator_leaves_uids_of_driver_and_executor_pods_to_the_platform() -> (
    None
):
    assert _env(_pod("openshift=true"))["EO_PLATFORM_ASSIGNS_UID"]["value"] == "true"
    assert "EO_PLATFORM_ASSIGNS_UID" not in _env(_pod())
    with pytest.raises(helm_python.HelmError, match="EO_PLATFORM_ASSIGNS_UID is set by the chart"):
        _pod(values={"operator": {"extraEnv": [{"name": "EO_PLATFORM_ASSIGNS_UID", "value": "x"}]}})


def test_a_null_uid_renders_no_run_as_user() -> None:
    spec = _pod(
        values={
            "operator": {
                "podSecurityContext": {"runAsUser": None, "runAsGroup": None, "fsGroup": None},
                "securityContext": {"runAsUser": None, "runAsGroup": None},
            }
        }
    )
    assert _uids(spec) == {}
    assert spec["securityContext"]["runAsNonRoot"] is True


def test_the_node_lost_grace_is_a_value_the_operator_gets_and_extra_env_cannot_replace() -> None:
    assert _env(_pod())["EO_NODE_LOST_GRACE_SECONDS"]["value"] == "30"
    spec = _pod("operator.nodeLostGraceSeconds=45")
    assert _env(spec)["EO_NODE_LOST_GRACE_SECONDS"]["value"] == "45"
    with pytest.raises(helm_python.HelmRenderError, match="EO_NODE_LOST_GRACE_SECONDS"):
        _pod("operator.extraEnv[0].name=EO_NODE_LOST_GRACE_SECONDS", "operator.extraEnv[0].value=x")
    with pytest.raises(helm_python.HelmValuesError):
        _pod("operator.nodeLostGraceSeconds=-1")


@pytest.mark.parametrize(
    ("value", "variable", "default", "bad"),
    [
        ("maxRequeueSeconds", "EO_MAX_REQUEUE_SECONDS", "20", "0"),
        ("idleHealthIntervalSeconds", "EO_IDLE_HEALTH_INTERVAL_SECONDS", "120", "-1"),
        ("deleteSinkTimeoutSeconds", "EO_DELETE_SINK_TIMEOUT_SECONDS", "300", "-5"),
    ],
)
def test_the_pass_and_deletion_timings_are_values_the_operator_gets(
    value: str, variable: str, default: str, bad: str
) -> None:
    assert _env(_pod())[variable]["value"] == default
    assert _env(_pod(f"operator.{value}=7"))[variable]["value"] == "7"
    with pytest.raises(helm_python.HelmRenderError, match=variable):
        _pod(f"operator.extraEnv[0].name={variable}", "operator.extraEnv[0].value=x")
    with pytest.raises(helm_python.HelmValuesError):
        _pod(f"operator.{value}={bad}")


def test_the_default_audit_interval_is_a_value_the_operator_gets_within_its_bounds() -> None:
    assert _env(_pod())["EO_AUDIT_INTERVAL_SECONDS"]["value"] == "300"
    assert _env(_pod("operator.auditIntervalSeconds=60"))["EO_AUDIT_INTERVAL_SECONDS"] == {
        "name": "EO_AUDIT_INTERVAL_SECONDS",
        "value": "60",
    }
    for bad in ("5", "100000"):  # a busy loop; longer than markers are kept
        with pytest.raises(helm_python.HelmValuesError):
            _pod(f"operator.auditIntervalSeconds={bad}")
    with pytest.raises(helm_python.HelmRenderError, match="EO_AUDIT_INTERVAL_SECONDS"):
        _pod("operator.extraEnv[0].name=EO_AUDIT_INTERVAL_SECONDS", "operator.extraEnv[0].value=x")
