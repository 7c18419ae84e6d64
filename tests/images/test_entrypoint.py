"""docker/entrypoint.sh, the job image's entrypoint, run on the host with stand-in programs.

`executor` (the argument Spark gives executor pods) must become the JVM command of Spark's
KubernetesExecutorBackend, built from the environment Spark sets on the pod; anything else
must reach `eo` untouched. Stand-in `java` and `eo` print the argv they were given, so every
word of the command is checked here without an image; tests/images/test_images.py runs the
real thing inside the built image.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ENTRYPOINT = Path(__file__).resolve().parents[2] / "docker" / "entrypoint.sh"
SPARK_ENV = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@orders-driver-svc.test.svc:7078",
    "SPARK_EXECUTOR_ID": "3",
    "SPARK_EXECUTOR_CORES": "2",
    "SPARK_APPLICATION_ID": "spark-1234",
    "SPARK_EXECUTOR_POD_IP": "10.1.2.3",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_EXECUTOR_POD_NAME": "orders-driver-exec-3",
}


def stand_in(path: Path, label: str) -> None:
    """An executable at ``path`` that prints ``[label, *its arguments]`` as JSON."""
    path.write_text(
        "#!/bin/sh\n"
        f"exec python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' {label} \"$@\"\n"
    )
    path.chmod(0o755)


@pytest.fixture
def sandbox(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A PATH with stand-in java and eo, and a fake SPARK_HOME with a jars folder."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("java", "eo"):
        stand_in(bin_dir / name, name)
    home = tmp_path / "pyspark"
    (home / "jars").mkdir(parents=True)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SPARK_HOME": str(home),
    }
    return home, env


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ENTRYPOINT), *args], env=env, capture_output=True, text=True, timeout=30, check=False
    )


def test_anything_but_executor_goes_to_eo_unchanged(sandbox: tuple[Path, dict[str, str]]) -> None:
    _, env = sandbox
    for args in (["run"], ["--help"], ["run", "/etc/eo/spec.yaml", "--epoch", "4"], []):
        result = run(env, *args)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == ["eo", *args]
    # Spark's driver argument is not special here: the operator runs drivers as `eo run`.
    assert json.loads(run(env, "driver", "x").stdout) == ["eo", "driver", "x"]


def test_executor_starts_the_kubernetes_executor_backend_with_sparks_environment(
    sandbox: tuple[Path, dict[str, str]],
) -> None:
    home, env = sandbox
    env = {
        **env,
        **SPARK_ENV,
        "SPARK_EXECUTOR_MEMORY": "1024m",
        # Spark numbers the JVM options; 10 must come after 2, not between 1 and 2.
        "SPARK_JAVA_OPT_10": "-Dlast=yes",
        "SPARK_JAVA_OPT_0": "-Dspark.driver.port=7078",
        "SPARK_JAVA_OPT_2": "-Dwith space=a b",
        "SPARK_JAVA_OPT_1": "-XX:+UseSerialGC",
        "SPARK_JAVA_OPT_X": "-Dignored=1",
    }
    result = run(env, "executor")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        "java",
        "-Dspark.driver.port=7078",
        "-XX:+UseSerialGC",
        "-Dwith space=a b",
        "-Dlast=yes",
        "-Xms1024m",
        "-Xmx1024m",
        "-cp",
        f"{home}/conf:{home}/jars/*",
        "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend",
        "--driver-url",
        SPARK_ENV["SPARK_DRIVER_URL"],
        "--executor-id",
        "3",
        "--cores",
        "2",
        "--app-id",
        "spark-1234",
        "--hostname",
        "10.1.2.3",
        "--resourceProfileId",
        "0",
        "--podName",
        "orders-driver-exec-3",
    ]


def test_executor_classpath_takes_sparks_extra_folders_and_java_home(
    sandbox: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    home, env = sandbox
    java_home = tmp_path / "jdk"
    (java_home / "bin").mkdir(parents=True)
    stand_in(java_home / "bin" / "java", "jdk-java")
    env = {
        **env,
        **SPARK_ENV,
        "JAVA_HOME": str(java_home),
        "SPARK_CLASSPATH": "/opt/first/*",
        "SPARK_EXTRA_CLASSPATH": "/opt/extra/*",
        "HADOOP_CONF_DIR": "/etc/hadoop",
        "SPARK_CONF_DIR": "/etc/spark",
        "SPARK_DIST_CLASSPATH": "/opt/dist/*",
    }
    argv = json.loads(run(env, "executor").stdout)
    assert argv[0] == "jdk-java", "JAVA_HOME's java, not the first on PATH"
    assert "-Xmx" not in " ".join(argv), "no SPARK_EXECUTOR_MEMORY: the JVM's default heap"
    classpath = argv[argv.index("-cp") + 1]
    assert classpath == (
        f"/etc/spark:/etc/hadoop:/opt/first/*:{home}/jars/*:/opt/extra/*:/opt/dist/*"
    )


def test_executor_names_every_missing_variable(sandbox: tuple[Path, dict[str, str]]) -> None:
    _, env = sandbox
    left_out = {"SPARK_EXECUTOR_ID", "SPARK_APPLICATION_ID"}
    partial = {k: v for k, v in SPARK_ENV.items() if k not in left_out}
    result = run({**env, **partial}, "executor")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "SPARK_EXECUTOR_ID SPARK_APPLICATION_ID not set" in result.stderr


def test_executor_takes_no_arguments_and_needs_sparks_jars(
    sandbox: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    _, env = sandbox
    result = run({**env, **SPARK_ENV}, "executor", "--cores", "4")
    assert result.returncode == 2
    assert "executor takes no arguments" in result.stderr
    result = run({**env, **SPARK_ENV, "SPARK_HOME": str(tmp_path / "nowhere")}, "executor")
    assert result.returncode == 2
    assert "no Spark jars" in result.stderr
