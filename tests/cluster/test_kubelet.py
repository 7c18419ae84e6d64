"""The process kubelet runs pods as local processes and reports them as a kubelet would."""

from __future__ import annotations

import signal
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client import ApiException, V1Pod

from tests.cluster.controlplane import NODE_MONITOR_GRACE_SECONDS
from tests.cluster.plugin import KubeCluster
from tests.cluster.processes import wait_until


def pod_manifest(name: str, script: str, **spec: Any) -> dict[str, Any]:
    """A pod whose only container runs ``python -c script``."""
    container = {
        "name": "main",
        "image": "eo:test",
        "command": ["python", "-c"],
        "args": [textwrap.dedent(script)],
        **spec.pop("container", {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }


@pytest.fixture
def core(kube_cluster: KubeCluster) -> Iterator[client.CoreV1Api]:
    with kube_cluster.api() as api:
        yield client.CoreV1Api(api)


def create(core: client.CoreV1Api, namespace: str, manifest: dict[str, Any]) -> None:
    core.create_namespaced_pod(namespace, V1Pod.model_validate(manifest))


def wait_for_phase(core: client.CoreV1Api, namespace: str, name: str, phase: str) -> V1Pod:
    found: list[V1Pod] = []

    def reached() -> bool:
        pod = core.read_namespaced_pod(name, namespace)
        found[:] = [pod]
        return pod.status is not None and pod.status.phase == phase

    wait_until(reached, timeout=30, what=f"pod {namespace}/{name} to be {phase}")
    return found[0]


def terminated_state(pod: V1Pod) -> client.V1ContainerStateTerminated:
    assert pod.status is not None and pod.status.container_statuses
    state = pod.status.container_statuses[0].state
    assert state is not None and state.terminated is not None
    return state.terminated


def pod_gone(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, namespace)
    except ApiException as error:
        return bool(error.status == 404)
    return False


def test_a_pod_that_exits_0_succeeds_on_the_fake_node_with_its_output_logged(
    kube_cluster: KubeCluster, kube_namespace: str, core: client.CoreV1Api
) -> None:
    create(core, kube_namespace, pod_manifest("ok", "print('hello from the pod')"))
    pod = wait_for_phase(core, kube_namespace, "ok", "Succeeded")
    assert pod.spec is not None and pod.spec.node_name == kube_cluster.node_name
    terminated = terminated_state(pod)
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")
    assert kube_cluster.kubelet.logs(kube_namespace, "ok") == "hello from the pod\n"


def test_a_pod_that_exits_3_fails_with_exit_code_3(
    kube_cluster: KubeCluster, kube_namespace: str, core: client.CoreV1Api
) -> None:
    create(core, kube_namespace, pod_manifest("bad", "import sys; sys.exit(3)"))
    pod = wait_for_phase(core, kube_namespace, "bad", "Failed")
    assert (terminated_state(pod).exit_code, terminated_state(pod).reason) == (3, "Error")


CRASH = """
import sys
for i in range(100):
    print(f"line {i}", flush=True)
sys.exit("RuntimeError: the last words")
"""


def test_a_failed_container_falls_back_to_its_log_tail_as_termination_message(
    kube_cluster: KubeCluster, kube_namespace: str, core: client.CoreV1Api
) -> None:
    fallback = {"terminationMessagePolicy": "FallbackToLogsOnError"}
    create(core, kube_namespace, pod_manifest("told", CRASH, container=fallback))
    create(core, kube_namespace, pod_manifest("quiet", CRASH))
    told = terminated_state(wait_for_phase(core, kube_namespace, "told", "Failed"))
    assert told.message is not None
    lines = told.message.splitlines()
    assert len(lines) == 80 and lines[-1] == "RuntimeError: the last words", lines[-3:]
    assert lines[0] == "line 21"
    quiet = terminated_state(wait_for_phase(core, kube_namespace, "quiet", "Failed"))
    assert quiet.message is None


def _waiting_reason(pod: V1Pod) -> tuple[str, str] | None:
    statuses = pod.status.container_statuses if pod.status else None
    state = statuses[0].state if statuses else None
    if state is None or state.waiting is None:
        return None
    return state.waiting.reason or "", state.waiting.message or ""


def test_an_image_whose_registry_cannot_resolve_waits_in_err_image_pull_then_backoff(
    kube_cluster: KubeCluster, kube_namespace: str, core: client.CoreV1Api
) -> None:
    image = {"image": "registry.invalid/eo-job:typo"}
    seen: list[tuple[str, str]] = []
    stream = watch.Watch()
    create(core, kube_namespace, pod_manifest("typo", "print('never')", container=image))
    for event in stream.stream(
        core.list_namespaced_pod,
        kube_namespace,
        field_selector="metadata.name=typo",
        timeout_seconds=30,
    ):
        found = _waiting_reason(event["object"])
        if found is not None and found not in seen:
            seen.append(found)
        if found is not None and found[0] == "ImagePullBackOff":
            stream.stop()
    assert [reason for reason, _ in seen] == ["ErrImagePull", "ImagePullBackOff"], seen
    assert "lookup registry.invalid: no such host" in seen[0][1]
    assert seen[1][1] == 'Back-off pulling image "registry.invalid/eo-job:typo"'
    pod = core.read_namespaced_pod("typo", kube_namespace)
    assert pod.status is not None and pod.status.phase == "Pending"
    with pytest.raises(KeyError):
        kube_cluster.kubelet.logs(kube_namespace, "typo")


def test_a_running_pod_is_ready_with_the_loopback_pod_ip(
    kube_cluster: KubeCluster, kube_namespace: str, core: client.CoreV1Api
) -> None:
    create(core, kube_namespace, pod_manifest("sleeper", "import time; time.sleep(60)"))
    pod = wait_for_phase(core, kube_namespace, "sleeper", "Running")
    assert pod.status is not None and pod.status.pod_ip == "127.0.0.1"
    ready = {c.type: c.status for c in pod.status.conditions or []}
    assert ready["Ready"] == "True"
    assert kube_cluster.kubelet.process_alive(kube_namespace, "sleeper")


def test_commands_resolve_to_this_installation_whatever_the_image(
    kube_cluster: KubeCluster, kube_namespace: str, core: client.CoreV1Api
) -> None:
    script = "import shutil, sys; print(sys.prefix); print(shutil.which('eo'))"
    create(core, kube_namespace, pod_manifest("which", script))
    wait_for_phase(core, kube_namespace, "which", "Succeeded")
    prefix, eo = kube_cluster.kubelet.logs(kube_namespace, "which").split()
    assert prefix == sys.prefix
    assert eo == str(Path(sys.prefix) / "bin" / "eo")


def test_env_from_secrets_config_maps_and_the_downward_api_reaches_the_process(
    kube_cluster: KubeCluster, kube_namespace: str, core: client.CoreV1Api
) -> None:
    core.create_namespaced_secret(
        kube_namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="db"), string_data={"password": "s3cret"}
        ),
    )
    core.create_namespaced_config_map(
        kube_namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="settings"), data={"mode": "fast"}),
    )
    env = [
        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "GREETING", "value": "$(POD) in $(MODE) mode"},
    ]
    script = (
        "import os; print(' '.join(os.environ[k] for k in "
        "['PASSWORD', 'MODE', 'POD', 'NS', 'APP', 'IP', 'GREETING']))"
    )
    manifest = pod_manifest("env", script, container={"env": env})
    manifest["metadata"]["labels"] = {"app": "demo"}
    create(core, kube_namespace, manifest)
    wait_for_phase(core, kube_namespace, "env", "Succeeded")
    assert kube_cluster.kubelet.logs(kube_namespace, "env").split() == [
        "s3cret",
        "fast",
        "env",
        kube_namespace,
        "demo",
        "127.0.0.1",
        "env",
        "in",
        "fast",
        "mode",
    ]


def test_a_pod_waits_for_a_missing_secret_and_starts_once_it_exists(
    kube_cluster: KubeCluster, kube_namespace: str, core: client.CoreV1Api
) -> None:
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "late", "key": "token"}}}]
    create(
        core,
        kube_namespace,
        pod_manifest("patient", "import os; print(os.environ['TOKEN'])", container={"env": env}),
    )

    def waiting_reason() -> str | None:
        status = core.read_namespaced_pod("patient", kube_namespace).status
        statuses = status.container_statuses if status else None
        state = statuses[0].state if statuses else None
        return state.waiting.reason if state and state.waiting else None

    wait_until(
        lambda: waiting_reason() == "CreateContainerConfigError",
        timeout=30,
        what="the pod to wait for its Secret",
    )
    core.create_namespaced_secret(
        kube_namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="late"), string_data={"token": "finally"}
        ),
    )
    wait_for_phase(core, kube_namespace, "patient", "Succeeded")
    assert kube_cluster.kubelet.logs(kube_namespace, "patient") == "finally\n"


def test_an_unsupported_volume_fails_the_pod_with_a_reason(
    kube_cluster: KubeCluster, kube_namespace: str, core: client.CoreV1Api
) -> None:
    manifest = pod_manifest(
        "vol", "print('never')", volumes=[{"name": "host", "hostPath": {"path": "/tmp"}}]
    )
    create(core, kube_namespace, manifest)
    pod = wait_for_phase(core, kube_namespace, "vol", "Failed")
    assert terminated_state(pod).reason == "UnsupportedVolume"
    assert "emptyDir" in (terminated_state(pod).message or "")


def test_a_pod_applied_with_kubectl_whose_command_is_missing_fails_with_start_error(
    kube_cluster: KubeCluster, kube_namespace: str, core: client.CoreV1Api
) -> None:
    manifest = textwrap.dedent("""
        apiVersion: v1
        kind: Pod
        metadata: {name: missing}
        spec:
          restartPolicy: Never
          containers: [{name: main, image: eo:test, command: [no-such-command-eo]}]
    """)
    kube_cluster.kubectl("apply", "-n", kube_namespace, "-f", "-", input=manifest)
    pod = wait_for_phase(core, kube_namespace, "missing", "Failed")
    assert terminated_state(pod).reason == "StartError"
    assert "no-such-command-eo" in (terminated_state(pod).message or "")


def test_graceful_deletion_sends_sigterm_and_then_the_pod_is_gone(
    kube_cluster: KubeCluster, kube_namespace: str, core: client.CoreV1Api
) -> None:
    script = """
        import signal, sys, time
        def stop(*_):
            print('got SIGTERM', flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        print('ready', flush=True)
        time.sleep(120)
    """
    create(core, kube_namespace, pod_manifest("graceful", script))
    wait_until(
        lambda: "ready" in _logs(kube_cluster, kube_namespace, "graceful"),
        timeout=30,
        what="the process to install its SIGTERM handler",
    )
    core.delete_namespaced_pod("graceful", kube_namespace, grace_period_seconds=30)
    wait_until(
        lambda: pod_gone(core, kube_namespace, "graceful"), timeout=20, what="the pod to be deleted"
    )
    assert not kube_cluster.kubelet.process_alive(kube_namespace, "graceful")
    assert "got SIGTERM" in kube_cluster.kubelet.logs(kube_namespace, "graceful")


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_period(
    kube_cluster: KubeCluster, kube_namespace: str, core: client.CoreV1Api
) -> None:
    script = """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print('ready', flush=True)
        time.sleep(120)
    """
    create(core, kube_namespace, pod_manifest("stubborn", script))
    wait_until(
        lambda: "ready" in _logs(kube_cluster, kube_namespace, "stubborn"),
        timeout=30,
        what="the process to ignore SIGTERM",
    )
    core.delete_namespaced_pod("stubborn", kube_namespace, grace_period_seconds=2)
    wait_until(
        lambda: pod_gone(core, kube_namespace, "stubborn"), timeout=20, what="the pod to be deleted"
    )
    assert not kube_cluster.kubelet.process_alive(kube_namespace, "stubborn")


def test_freeze_stops_the_process_and_thaw_resumes_it(
    kube_cluster: KubeCluster, kube_namespace: str, core: client.CoreV1Api
) -> None:
    create(core, kube_namespace, pod_manifest("frozen", "import time; time.sleep(120)"))
    wait_for_phase(core, kube_namespace, "frozen", "Running")
    pid = kube_cluster.kubelet.pid(kube_namespace, "frozen")
    kube_cluster.kubelet.freeze(kube_namespace, "frozen")
    wait_until(lambda: _proc_state(pid) == "T", timeout=5, what="the process to stop")
    assert kube_cluster.kubelet.process_alive(kube_namespace, "frozen")
    kube_cluster.kubelet.thaw(kube_namespace, "frozen")
    wait_until(lambda: _proc_state(pid) == "S", timeout=5, what="the process to resume")
    kube_cluster.kubelet.kill(kube_namespace, "frozen", signal.SIGKILL)
    pod = wait_for_phase(core, kube_namespace, "frozen", "Failed")
    assert terminated_state(pod).exit_code == 128 + signal.SIGKILL


def test_a_partitioned_node_is_marked_unreachable_by_the_control_plane_not_by_itself(
    kube_cluster: KubeCluster, kube_namespace: str, core: client.CoreV1Api
) -> None:
    kubelet, node = kube_cluster.kubelet, kube_cluster.node_name
    for name in ("graceful", "forced"):
        create(core, kube_namespace, pod_manifest(name, "import time; time.sleep(300)"))
        wait_for_phase(core, kube_namespace, name, "Running")
    kubelet.partition()
    try:
        # kube-controller-manager's node lifecycle controller, not the kubelet, writes this.
        wait_until(
            lambda: _node_ready(core, node) == "Unknown",
            timeout=NODE_MONITOR_GRACE_SECONDS + 30,
            what="the node lifecycle controller to mark the silent node Ready=Unknown",
        )
        wait_until(
            lambda: {"NoSchedule", "NoExecute"} <= _unreachable_taints(core, node),
            timeout=30,
            what="the node.kubernetes.io/unreachable taints",
        )
        wait_until(
            lambda: _pod_ready(core, kube_namespace, "graceful") == "False",
            timeout=30,
            what="the pods marked Ready=False",
        )
        pod = core.read_namespaced_pod("graceful", kube_namespace)
        assert pod.status is not None and pod.status.phase == "Running"  # nobody says otherwise
        assert kubelet.process_alive(kube_namespace, "graceful")
        # New pods go to the other node; nothing reaches the partitioned node's processes.
        create(core, kube_namespace, pod_manifest("elsewhere", "print('on the other node')"))
        moved = wait_for_phase(core, kube_namespace, "elsewhere", "Succeeded")
        assert moved.spec is not None and moved.spec.node_name == kube_cluster.spare.node_name
        core.delete_namespaced_pod("graceful", kube_namespace, grace_period_seconds=1)
        core.delete_namespaced_pod("forced", kube_namespace, grace_period_seconds=0)
        wait_until(
            lambda: pod_gone(core, kube_namespace, "forced"),
            timeout=10,
            what="the force-deleted pod object to go",
        )
        assert kubelet.process_alive(kube_namespace, "graceful")
        assert kubelet.process_alive(kube_namespace, "forced")
    finally:
        kubelet.heal()
    wait_until(
        lambda: _node_ready(core, node) == "True" and not _unreachable_taints(core, node),
        timeout=30,
        what="the healed node Ready and untainted",
    )
    wait_until(
        lambda: pod_gone(core, kube_namespace, "graceful"),
        timeout=20,
        what="the healed node to finish the deletion",
    )
    wait_until(
        lambda: not kubelet.process_alive(kube_namespace, "forced"),
        timeout=20,
        what="the healed node to kill the process of the force-deleted pod",
    )
    assert not kubelet.process_alive(kube_namespace, "graceful")


def _logs(cluster: KubeCluster, namespace: str, name: str) -> str:
    try:
        return cluster.kubelet.logs(namespace, name)
    except KeyError:
        return ""


def _proc_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _node_ready(core: client.CoreV1Api, name: str) -> str | None:
    node = core.read_node(name)
    conditions = node.status.conditions if node.status else None
    return next((c.status for c in conditions or [] if c.type == "Ready"), None)


def _unreachable_taints(core: client.CoreV1Api, name: str) -> set[str]:
    node = core.read_node(name)
    taints = (node.spec.taints if node.spec else None) or []
    return {t.effect for t in taints if t.key == "node.kubernetes.io/unreachable"}


def _pod_ready(core: client.CoreV1Api, namespace: str, name: str) -> str | None:
    pod = core.read_namespaced_pod(name, namespace)
    conditions = pod.status.conditions if pod.status else None
    return next((c.status for c in conditions or [] if c.type == "Ready"), None)
