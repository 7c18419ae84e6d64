"""Both images built here with buildah and run: who they run as, what they hold, what they do.

The job image runs a real `eo run --available-now` against the test PostgreSQL (chroot
isolation shares the host's network) and serves as Spark's executor image: its entrypoint
sends `executor` to Spark's KubernetesExecutorBackend and everything else to `eo`.
"""

from __future__ import annotations

import re
import socket
import subprocess
import threading
import tomllib
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench import fast_jvm
from tests.images import buildah
from tests.runtime import harness

# One worker builds and runs the images while the other suites run on the rest. A cold build
# (base, then both targets) took 9.6 min on a loaded 2-core machine: beyond the suite's
# 15-minute default timeout under more load, so a test may wait for it longer (a stuck build
# still ends: buildah.build gives up first).
pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("images"),
    pytest.mark.timeout(buildah.BUILD_TIMEOUT + 300),
]

USER = f"{buildah.UID}:{buildah.UID}"


class ImageReport(UserWarning):
    """Image sizes and build times, shown in pytest's warnings summary."""


@pytest.mark.parametrize("target", ["job", "operator"])
def test_the_image_builds_and_its_size_is_printed(
    target: str, build: Callable[[str], buildah.Build]
) -> None:
    result = build(target)
    assert result.code == 0, result.tail()
    image = buildah.image_name(target)
    size = buildah.size_bytes(image)
    warnings.warn(
        ImageReport(f"{image}: {size / 1e6:.0f} MB (built in {result.seconds:.0f} s)"),
        stacklevel=1,
    )
    assert size > 0


BASE_LINE = re.compile(r"==> \[build-images [0-9:]+\] base (\S+) (cached|loaded from|built in)")


def test_a_base_missing_from_buildahs_storage_is_loaded_from_eo_cache_not_rebuilt(
    operator_image: str, tmp_path: Path
) -> None:
    first = buildah.build(tmp_path / "first.log", "--base-only")
    assert first.code == 0, first.tail()
    lines = BASE_LINE.findall(first.log.read_text())
    assert len(lines) == 1, first.tail()
    base = lines[0][0]
    before = buildah.image_id(base)
    assert before, f"{base} is not in buildah's storage after a build"
    # As on a new machine whose EO_CACHE was restored: the base is gone from the storage.
    # --force: a build killed half-way (Ctrl-C, a CI job cancelled) leaves working containers
    # of the base behind, and buildah refuses to remove an image a container uses (exit 125).
    subprocess.run(["buildah", "rmi", "--force", base], check=True, capture_output=True)
    assert buildah.image_id(base) is None
    again = buildah.build(tmp_path / "again.log", "--base-only")
    assert again.code == 0, again.tail()
    log = again.log.read_text()
    assert BASE_LINE.findall(log) == [(base, "loaded from")], again.tail()
    assert "debootstrap" not in log
    # The same image, so the targets' layer cache (keyed by the base's id) still holds.
    assert buildah.image_id(base) == before


@pytest.mark.parametrize(
    ("fixture", "command"), [("job_image", "run"), ("operator_image", "operator")]
)
def test_the_image_runs_as_uid_10001_and_only_tmp_is_writable(
    fixture: str, command: str, request: pytest.FixtureRequest
) -> None:
    image: str = request.getfixturevalue(fixture)
    with buildah.container(image) as box:
        assert box.config["User"] == USER
        assert box.config["Cmd"] == [command]
        assert "HOME=/tmp" in box.config["Env"]  # type: ignore[operator]
        ids = box.run(["sh", "-c", "id -u; id -g"])  # as the image says: no --user
        assert ids.returncode == 0, ids.stderr
        assert ids.stdout.split() == [str(buildah.UID)] * 2
        # Every path of the image's own filesystem that uid 10001 could write to.
        writable = box.run(["sh", "-c", "find / -xdev -writable 2>/dev/null; true"])
        assert writable.stdout.split() == ["/tmp"], writable.stdout
        probe = box.run(
            [
                "sh",
                "-c",
                "touch /tmp/probe && echo tmp-ok; "
                "for f in /probe /opt/eo/probe /opt/eo/venv/bin/eo /etc/passwd; do "
                "  (echo x >>$f) 2>/dev/null && echo wrote $f; done; true",
            ]
        )
        assert probe.stdout.split() == ["tmp-ok"], probe.stdout + probe.stderr


def test_the_operator_image_has_no_jvm_and_no_pyspark_and_runs_eo_operator(
    operator_image: str,
) -> None:
    with buildah.container(operator_image) as box:
        assert box.config["Entrypoint"] == ["eo"]
        java = box.run(
            [
                "sh",
                "-c",
                "command -v java; find / -xdev \\( -name 'libjvm.so' -o -name '*.jar' "
                "-o -name pyspark \\) -print 2>/dev/null; true",
            ]
        )
        assert java.stdout == "", java.stdout
        pyspark = box.run(["python", "-c", "import pyspark"])
        assert pyspark.returncode == 1
        assert "No module named 'pyspark'" in pyspark.stderr
        kopf = box.run(["python", "-c", "import kopf, eo_operator"])
        assert kopf.returncode == 0, kopf.stderr
        help_ = box.entrypoint("operator", "--help")
        assert help_.returncode == 0, help_.stderr
        assert "usage: eo operator" in help_.stdout


def pinned_pyspark() -> str:
    """The PySpark version pyproject.toml pins for the spark extra."""
    project = tomllib.loads((buildah.ROOT / "pyproject.toml").read_text())["project"]
    pins = [d for d in project["optional-dependencies"]["spark"] if d.startswith("pyspark==")]
    assert len(pins) == 1, pins
    return pins[0].removeprefix("pyspark==")


# eo's own lookup (runtime/packages.py), run in the image: which jar folders `eo run` will use.
JARS_PROBE = """
from eo_jobs.runtime import packages
for name, jars in [("kafka", packages.kafka_connector_jars()),
                   ("s3a", packages.hadoop_aws_jars())]:
    print(name, len(jars), jars[0].parent)
"""


def test_the_job_image_has_java_17_pyspark_the_jars_and_its_entrypoint_runs_eo(
    job_image: str,
) -> None:
    version = pinned_pyspark()
    with buildah.container(job_image) as box:
        java = box.run(["java", "-version"])
        assert java.returncode == 0, java.stderr
        assert 'version "17.' in java.stderr, java.stderr
        help_ = box.entrypoint("--help")
        assert help_.returncode == 0, help_.stderr
        assert help_.stdout.startswith("usage: eo"), help_.stdout
        spark = box.run(["python", "-c", "import pyspark; print(pyspark.__version__)"])
        assert spark.stdout.strip() == version, spark.stderr
        # Spark's Kafka connector and Hadoop's S3A jars, both found by the runtime in the
        # image's EO_CACHE (so s3a:// checkpoints and Kafka sources work without a network).
        probe = box.run(["python", "-c", JARS_PROBE])
        assert probe.returncode == 0, probe.stderr
        found = {line.split()[0]: line.split()[1:] for line in probe.stdout.splitlines()}
        assert set(found) == {"kafka", "s3a"}, probe.stdout
        assert found["kafka"][1] == f"/opt/eo/cache/jars/spark-kafka-{version}"
        assert found["s3a"][1].startswith("/opt/eo/cache/jars/hadoop-aws-"), probe.stdout
        assert int(found["kafka"][0]) > 0 and int(found["s3a"][0]) > 1, probe.stdout
        # The broker jars are for the tests only; the image leaves them out.
        broker = box.run(["sh", "-c", "ls -d /opt/eo/cache/jars/kafka-broker-* 2>&1; true"])
        assert "No such file" in broker.stdout, broker.stdout


@pytest.fixture
def fake_driver() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP port that accepts connections, records what arrives, and hangs up."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.5)
    received: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    received.append(conn.recv(4096))
                except OSError:
                    received.append(b"")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], received
    finally:
        stop.set()
        thread.join(5)
        server.close()


EXECUTOR_ENV = {
    "SPARK_EXECUTOR_ID": "7",
    "SPARK_EXECUTOR_CORES": "1",
    "SPARK_APPLICATION_ID": "spark-eo-image-test",
    "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_EXECUTOR_POD_NAME": "orders-driver-exec-7",
    "SPARK_EXECUTOR_MEMORY": "256m",
    "SPARK_JAVA_OPT_0": "-XX:+UseSerialGC",
    "SPARK_JAVA_OPT_1": "-Dspark.rpc.numRetries=1",
}


def test_the_job_image_entrypoint_starts_spark_executor_backend_for_executor(
    job_image: str, fake_driver: tuple[int, list[bytes]]
) -> None:
    port, received = fake_driver
    env = {**EXECUTOR_ENV, "SPARK_DRIVER_URL": f"spark://CoarseGrainedScheduler@127.0.0.1:{port}"}
    with buildah.container(job_image) as box:
        result = box.entrypoint("executor", env=env, timeout=300)
    out = result.stdout + result.stderr
    # The JVM ran Spark's Kubernetes executor backend, which dialled the driver URL (over the
    # host network), got hung up on, and gave up: no driver, no executor.
    assert "KubernetesExecutorBackend" in out, out
    assert received, f"the executor never connected to the driver URL:\n{out}"
    assert result.returncode != 0, out


def test_the_job_image_entrypoint_says_what_an_executor_misses(job_image: str) -> None:
    with buildah.container(job_image) as box:
        result = box.entrypoint("executor")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "SPARK_DRIVER_URL" in result.stderr
    assert "SPARK_EXECUTOR_POD_NAME" in result.stderr


# What OpenShift's restricted SCC does: a UID from the namespace's range, no passwd entry for
# it in the image, GID 0.
ARBITRARY_USER = "1000700000:0"


@pytest.mark.parametrize(
    "user",
    [None, ARBITRARY_USER],
    ids=["image-user", "arbitrary-uid-without-passwd-entry"],
)
def test_the_job_image_runs_a_files_pipeline_into_postgres_exactly(
    job_image: str, pg_dsn: str, tmp_path: Path, user: str | None
) -> None:
    # The work folder is mounted at the same path inside the container, so the pipeline
    # file's paths hold on both sides; the image's user (or any) may write the checkpoint.
    work = tmp_path / "work"
    harness.create_table(pg_dsn)
    truth = harness.write_files(work / "in", files=3, per_file=40)
    spec = harness.files_pipeline(work)
    for path in [work, *work.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    env = {
        "TEST_DSN": pg_dsn,
        "EO_SPARK_DRIVER_JAVA_OPTIONS": fast_jvm.BASE,
        "EO_LOG_LEVEL": "INFO",
    }
    with buildah.container(job_image) as box:
        result = box.entrypoint(
            "run",
            str(spec),
            "--epoch",
            "1",
            "--metrics-port",
            "0",
            "--available-now",
            env=env,
            volumes=[(work, str(work))],
            user=user,
            timeout=600,
        )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "Tini is not running as PID 1" not in out, "tini reaps as a subreaper (-s)"
    assert harness.assert_exact(pg_dsn, truth).rows == 120
    assert '"event": "batch"' in out
    # The writer tasks ran in the JVM: the image's writer jar (EO_WRITER_JARS) was found.
    assert '"event": "writer", "sink": "orders", "path": "jvm"' in out, out
