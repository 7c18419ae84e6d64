"""Starting a pod's first container as a local process, and what is kept about it.

Images are not run: ``PATH`` starts with this venv's bin folder, so ``eo``, ``python`` and
every other console script resolve to this checkout's installation whatever the image says.
The process inherits only a few host variables (``INHERITED_ENV``) besides the pod's own
env, runs in a per-pod working folder, and writes stdout and stderr to one log file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kubernetes.client import CoreV1Api, V1Pod

from tests.cluster.podapi import api_env, volume_mounts
from tests.cluster.podenv import command_line, container_env
from tests.cluster.podspec import UnsupportedPodError, check_supported, image_entrypoint
from tests.cluster.podvolumes import claim_mounts, mount_prefix
from tests.cluster.processes import spawn

INHERITED_ENV = (
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "JAVA_HOME",
    "EO_CACHE",
    "PYTHONPATH",
)
"""``PYTHONPATH`` too: a test run from a git worktree puts that worktree's code first, and its
pods (the job image stand-in) must run that code, not the venv's editable install."""


@dataclass
class PodProcess:
    """One pod's process and what the API was last told about it."""

    uid: str
    namespace: str
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    started: datetime
    reported: str = ""
    term_deadline: float | None = None
    finished: datetime | None = None


LOG_TAIL_LINES = 80
LOG_TAIL_BYTES = 2048
"""What the real kubelet takes from a failed container's log for FallbackToLogsOnError."""


def termination_message(pod: V1Pod, tracked: PodProcess, exit_code: int) -> str:
    """The container's termination message, as the real kubelet fills it in.

    No file is written at ``terminationMessagePath`` (the process runs outside the pod's mount
    namespace), so the message is empty, except that with ``FallbackToLogsOnError`` a failed
    container gets the last 80 lines (at most 2 KiB) of its log.
    """
    assert pod.spec is not None
    policy = pod.spec.containers[0].termination_message_policy or "File"
    if exit_code == 0 or policy != "FallbackToLogsOnError":
        return ""
    tail = b"".join(tracked.log_path.read_bytes().splitlines(keepends=True)[-LOG_TAIL_LINES:])
    return tail[-LOG_TAIL_BYTES:].decode(errors="replace")


def spark_home() -> str | None:
    """PySpark's folder in this venv: the job image's Spark (its jars are the executor's)."""
    try:
        import pyspark
    except ImportError:
        return None
    return str(Path(pyspark.__file__).parent)


def base_env(pod_name: str, extra: dict[str, str], server: str = "") -> dict[str, str]:
    """The host part of a pod's environment: venv-first PATH, HOSTNAME, ``INHERITED_ENV``,
    the API server's ``KUBERNETES_SERVICE_*`` and the image's SPARK_HOME (this venv's)."""
    env = {key: os.environ[key] for key in INHERITED_ENV if key in os.environ}
    venv_bin = Path(sys.prefix) / "bin"
    env["PATH"] = f"{venv_bin}{os.pathsep}{os.environ.get('PATH', os.defpath)}"
    env["HOSTNAME"] = pod_name
    home = spark_home()
    if home is not None:
        env["SPARK_HOME"] = home
    if server:
        env |= api_env(server)
    return env | extra


def launch(
    pod: V1Pod, core: CoreV1Api, root: Path, extra_env: dict[str, str], server: str = ""
) -> PodProcess:
    """Start ``pod``'s process under ``root``; ``server`` is the API server pods call.

    Raises ``UnsupportedPodError`` (the pod fails) or ``EnvNotReadyError`` (the pod waits).
    """
    meta, spec = pod.metadata, pod.spec
    assert meta is not None and spec is not None
    assert meta.uid is not None and meta.name is not None and meta.namespace is not None
    check_supported(pod)
    container = spec.containers[0]
    pod_env = container_env(pod, container, core)
    env = base_env(meta.name, extra_env, server) | pod_env
    argv = command_line(container, pod_env)
    if not container.command:
        argv = [*(image_entrypoint(container.image or "") or []), *argv]
    executable = shutil.which(argv[0], path=env.get("PATH", ""))
    if executable is None:
        message = f'exec: "{argv[0]}": executable file not found in $PATH'
        raise UnsupportedPodError("StartError", message)
    folder = root / f"{meta.namespace}_{meta.name}_{meta.uid}"
    mounts = mount_prefix([*claim_mounts(pod, core), *volume_mounts(pod, core, folder)])
    (folder / "work").mkdir(parents=True, exist_ok=True)
    log_path = folder / "container.log"
    with log_path.open("ab") as output:
        process = spawn([*mounts, executable, *argv[1:]], log=output, cwd=folder / "work", env=env)
    return PodProcess(
        meta.uid, meta.namespace, meta.name, process, log_path, started=datetime.now(UTC)
    )
