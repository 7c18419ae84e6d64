"""The driver pod eo builds, with a user's template laid over it: the template adds, eo keeps."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from eo_jobs.spec import SpecError, parse_pipeline, pod_template
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
    assert sidecar == {
        "name": "log-shipper",
        "image": "fluent-bit:3",
        # The floor every added container gets (see the tests below).
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
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


# The security floor (review N7): a template that could reach the node, or run a container
# with more rights than eo's own, is refused naming the field and the fix, and a template laid
# over eo's pod never loosens eo's security context even if it got past the refusals.

PATH_OF_DRIVER_TEMPLATE = "spec.driver.podTemplate."


def _refused(template: dict[str, Any], main: str = "driver") -> dict[str, str]:
    return dict(pod_template.refusals(template, main))


def _sidecar(**fields: Any) -> dict[str, Any]:
    return {
        "spec": {"containers": [{"name": "driver"}, {"name": "helper", "image": "h:1", **fields}]}
    }


@pytest.mark.parametrize(
    ("volume", "kind"),
    [
        ({"hostPath": {"path": "/"}}, "hostPath"),
        ({"hostPath": {"path": "/run/containerd/containerd.sock"}}, "hostPath"),
        ({"nfs": {"server": "nas", "path": "/export"}}, "nfs"),
        ({"iscsi": {"targetPortal": "10.0.0.1:3260", "iqn": "iqn.x", "lun": 0}}, "iscsi"),
        ({"gitRepo": {"repository": "https://example.com/r.git"}}, "gitRepo"),
    ],
)
def test_a_template_volume_of_a_type_outside_the_allow_list_is_refused_naming_the_fix(
    volume: dict[str, Any], kind: str
) -> None:
    found = _refused({"spec": {"volumes": [{"name": "v", **volume}]}})

    reason = found[f"spec.volumes[0].{kind}"]
    assert "persistentVolumeClaim" in reason and "emptyDir" in reason, reason


def test_a_host_path_volume_is_refused_by_the_spec_naming_the_full_field_path() -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"].setdefault("driver", {})["podTemplate"] = {
        "spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}
    }
    with pytest.raises(SpecError) as caught:
        parse_pipeline(doc)
    assert f"{PATH_OF_DRIVER_TEMPLATE}spec.volumes[0].hostPath" in str(caught.value)


@pytest.mark.parametrize(
    "volume",
    [
        {"configMap": {"name": "c"}},
        {"secret": {"secretName": "s"}},
        {"emptyDir": {}},
        {"projected": {"sources": [{"configMap": {"name": "c"}}]}},
        {"persistentVolumeClaim": {"claimName": "p"}},
        {"downwardAPI": {"items": []}},
        {"csi": {"driver": "secrets-store.csi.k8s.io"}},
        {"ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
    ],
)
def test_a_template_volume_of_an_allowed_type_passes(volume: dict[str, Any]) -> None:
    assert _refused({"spec": {"volumes": [{"name": "v", **volume}]}}) == {}


@pytest.mark.parametrize("where", ["spec.securityContext", "spec.containers[1].securityContext"])
@pytest.mark.parametrize("profile", ["seccompProfile", "appArmorProfile"])
def test_an_unconfined_seccomp_or_apparmor_profile_is_refused(where: str, profile: str) -> None:
    context = {profile: {"type": "Unconfined"}}
    template = (
        {"spec": {"securityContext": context}}
        if where == "spec.securityContext"
        else _sidecar(securityContext=context)
    )

    reason = _refused(template)[f"{where}.{profile}"]
    assert "RuntimeDefault" in reason and "Localhost" in reason, reason


@pytest.mark.parametrize("profile", ["seccompProfile", "appArmorProfile"])
def test_a_localhost_or_runtime_default_profile_passes(profile: str) -> None:
    local = {"type": "Localhost", "localhostProfile": "profiles/tight.json"}
    template = {
        "spec": {
            "securityContext": {profile: {"type": "RuntimeDefault"}},
            "containers": [{"name": "driver", "securityContext": {profile: local}}],
        }
    }
    assert _refused(template) == {}


@pytest.mark.parametrize(
    ("context", "field"),
    [
        ({"runAsGroup": 0}, "runAsGroup"),
        ({"fsGroup": 0}, "fsGroup"),
        ({"supplementalGroups": [2000, 0]}, "supplementalGroups"),
    ],
)
def test_the_root_group_is_refused_in_the_pod_security_context(
    context: dict[str, Any], field: str
) -> None:
    reason = _refused({"spec": {"securityContext": context}})[f"spec.securityContext.{field}"]
    assert "group 0" in reason, reason


def test_a_sidecar_running_as_the_root_group_is_refused() -> None:
    found = _refused(_sidecar(securityContext={"runAsGroup": 0}))
    assert "group 0" in found["spec.containers[1].securityContext.runAsGroup"]


@pytest.mark.parametrize("where", ["spec.securityContext", "spec.containers[1].securityContext"])
def test_an_selinux_type_is_refused_and_a_level_passes(where: str) -> None:
    def template(options: dict[str, str]) -> dict[str, Any]:
        context = {"seLinuxOptions": options}
        if where == "spec.securityContext":
            return {"spec": {"securityContext": context}}
        return _sidecar(securityContext=context)

    reason = _refused(template({"type": "spc_t"}))[f"{where}.seLinuxOptions.type"]
    assert "level" in reason, reason
    assert _refused(template({"level": "s0:c123,c456"})) == {}


@pytest.mark.parametrize(
    ("template", "path"),
    [
        (
            {
                "spec": {
                    "containers": [
                        {"name": "driver", "securityContext": {"capabilities": {"drop": []}}}
                    ]
                }
            },
            "spec.containers[0].securityContext.capabilities.drop",
        ),
        (
            _sidecar(securityContext={"capabilities": {"drop": ["NET_RAW"]}}),
            "spec.containers[1].securityContext.capabilities.drop",
        ),
        (
            {
                "spec": {
                    "initContainers": [
                        {"name": "init", "securityContext": {"capabilities": {"drop": ["CHOWN"]}}}
                    ]
                }
            },
            "spec.initContainers[0].securityContext.capabilities.drop",
        ),
    ],
)
def test_a_capability_drop_list_without_all_is_refused(template: dict[str, Any], path: str) -> None:
    reason = _refused(template)[path]
    assert "ALL" in reason, reason


def test_a_drop_list_with_all_and_more_passes() -> None:
    template = _sidecar(securityContext={"capabilities": {"drop": ["ALL", "NET_RAW"]}})
    assert _refused(template) == {}


@pytest.mark.parametrize("field", ["containers", "initContainers"])
def test_an_added_capability_is_refused_on_any_container(field: str) -> None:
    container = {"name": "helper", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}
    found = _refused({"spec": {field: [container]}})
    assert "dropped" in found[f"spec.{field}[0].securityContext.capabilities.add"]


@pytest.mark.parametrize("field", ["containers", "initContainers"])
def test_a_host_port_is_refused_on_any_container(field: str) -> None:
    container = {
        "name": "helper",
        "image": "h:1",
        "ports": [{"containerPort": 8080}, {"containerPort": 2375, "hostPort": 2375}],
    }
    reason = _refused({"spec": {field: [container]}})[f"spec.{field}[0].ports[1].hostPort"]
    assert "Service" in reason, reason


@pytest.mark.parametrize("field", ["containers", "initContainers"])
@pytest.mark.parametrize(
    ("context", "key", "why"),
    [
        ({"runAsUser": 0}, "runAsUser", "non-root"),
        ({"runAsNonRoot": False}, "runAsNonRoot", "non-root"),
        ({"privileged": True}, "privileged", "privileged"),
        ({"allowPrivilegeEscalation": True}, "allowPrivilegeEscalation", "escalation"),
        ({"procMount": "Unmasked"}, "procMount", "masked"),
        ({"windowsOptions": {"hostProcess": True}}, "windowsOptions.hostProcess", "node"),
    ],
)
def test_a_sidecar_or_init_container_may_not_run_as_root_or_with_privilege(
    field: str, context: dict[str, Any], key: str, why: str
) -> None:
    container = {"name": "helper", "image": "h:1", "securityContext": context}
    reason = _refused({"spec": {field: [container]}})[f"spec.{field}[0].securityContext.{key}"]
    assert why in reason, reason


def test_an_unsafe_sysctl_is_refused_and_a_safe_one_passes() -> None:
    unsafe = {"sysctls": [{"name": "kernel.core_pattern", "value": "|/bin/sh"}]}
    reason = _refused({"spec": {"securityContext": unsafe}})["spec.securityContext.sysctls"]
    assert "kernel.core_pattern" in reason, reason
    safe = {"sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]}
    assert _refused({"spec": {"securityContext": safe}}) == {}


def test_an_unconfined_apparmor_annotation_is_refused() -> None:
    key = "container.apparmor.security.beta.kubernetes.io/helper"
    found = _refused({"metadata": {"annotations": {key: "unconfined"}}})
    assert "appArmorProfile" in found["metadata.annotations"]
    assert _refused({"metadata": {"annotations": {key: "runtime/default"}}}) == {}


def test_a_security_context_that_is_not_an_object_is_refused() -> None:
    found = _refused({"spec": {"securityContext": "privileged"}})
    assert "object" in found["spec.securityContext"]


WEAKENING_TEMPLATE: dict[str, Any] = {
    "spec": {
        "securityContext": {
            "runAsNonRoot": False,
            "runAsUser": 0,
            "runAsGroup": 0,
            "fsGroup": 0,
            "supplementalGroups": [0],
            "seccompProfile": {"type": "Unconfined"},
            "appArmorProfile": {"type": "Unconfined"},
            "seLinuxOptions": {"type": "spc_t"},
            "sysctls": [{"name": "kernel.core_pattern", "value": "|/bin/sh"}],
        },
        "containers": [
            {
                "name": "driver",
                "securityContext": {
                    "readOnlyRootFilesystem": False,
                    "allowPrivilegeEscalation": True,
                    "privileged": True,
                    "runAsUser": 0,
                    "capabilities": {"drop": [], "add": ["SYS_ADMIN"]},
                    "seccompProfile": {"type": "Unconfined"},
                    "procMount": "Unmasked",
                },
            },
            {
                "name": "helper",
                "image": "h:1",
                "securityContext": {"privileged": True, "capabilities": {"add": ["ALL"]}},
            },
        ],
        "initContainers": [{"name": "init", "image": "h:1", "securityContext": {"runAsGroup": 0}}],
    }
}


def test_merging_a_template_never_weakens_eos_security_context() -> None:
    # merged() runs after refusals() in eo; it holds the floor on its own all the same.
    plain = _pod(None)
    floor_pod = copy.deepcopy(plain["spec"]["securityContext"])
    floor_driver = copy.deepcopy(plain["spec"]["containers"][0]["securityContext"])

    spec = pod_template.merged(plain, WEAKENING_TEMPLATE, "driver")["spec"]

    assert spec["securityContext"] == floor_pod
    driver, helper = spec["containers"]
    assert driver["securityContext"] == floor_driver
    assert helper["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert spec["initContainers"][0]["securityContext"] == helper["securityContext"]


def test_every_container_a_template_adds_runs_without_privilege_escalation_or_capabilities() -> (
    None
):
    spec = _pod(TEMPLATE)["spec"]
    sidecar = spec["containers"][1]
    assert sidecar["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def test_a_sidecar_keeps_what_tightens_its_security_context() -> None:
    tighter = {
        "readOnlyRootFilesystem": True,
        "runAsUser": 20000,
        "capabilities": {"drop": ["ALL", "NET_RAW"]},
        "seccompProfile": {"type": "Localhost", "localhostProfile": "tight.json"},
    }
    spec = _pod(_sidecar(securityContext=tighter))["spec"]
    assert spec["containers"][1]["securityContext"] == {
        **tighter,
        "allowPrivilegeEscalation": False,
    }
