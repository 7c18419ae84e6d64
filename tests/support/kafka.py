"""A real single-node Kafka broker for tests, and client helpers to assert on its topics.

The broker is Apache Kafka itself, run in KRaft combined mode (broker and controller in one
JVM) from the Maven jars that `scripts/fetch-jars.sh` caches: no Docker, no download at test
time. Every broker gets a fresh temporary log folder, a random cluster id and free loopback
ports, so parallel test workers never share state. Its helper methods are those of
`kafka_client`, bound to this broker.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tests.support import kafka_client
from tests.support.kafka_client import ConsumedRecord, Payload
from tests.support.process import die_with_parent, free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSIONS_FILE = REPO_ROOT / "tools" / "jars" / "versions.properties"
JVM_OPTIONS = (
    "-Xmx512m",
    "-Xms128m",
    "-XX:+UseSerialGC",
    # C1 only: the broker moves a few thousand records per test, and this halves its start.
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
)


class BrokerSetupError(RuntimeError):
    """The broker cannot start here: its jars are not fetched yet, or there is no java."""


class BrokerFailedError(RuntimeError):
    """The broker process exited or did not become ready; the message carries its log tail."""


def kafka_version() -> str:
    """The pinned broker version, shared with fetch-jars.sh through versions.properties."""
    for line in VERSIONS_FILE.read_text(encoding="utf-8").splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == "kafka.broker.version":
            return value.strip()
    raise BrokerSetupError(f"kafka.broker.version is not set in {VERSIONS_FILE}")


def broker_jars_dir() -> Path:
    """The cached jar folder of the pinned broker; raises with the fix when it is absent."""
    cache = Path(os.environ.get("EO_CACHE") or Path.home() / ".cache" / "eo")
    folder = cache / "jars" / f"kafka-broker-{kafka_version()}"
    if not (folder / ".complete").is_file():
        raise BrokerSetupError(
            f"the Kafka broker jars are not in {folder}: run scripts/fetch-jars.sh "
            "(or ./dev setup) to fetch them from Maven Central"
        )
    return folder


def _random_cluster_id(random_bytes: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A cluster id in Kafka's Uuid text form: 16 random bytes, URL-safe base64, no padding.

    One id in 64 would start with "-", which the storage tool's argument parser takes for an
    option ("--cluster-id: expected one argument"); Kafka's own Uuid.randomUuid draws again in
    that case, and so does this.
    """
    while True:
        text = base64.urlsafe_b64encode(random_bytes()).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text


class KafkaBroker:
    """One Kafka broker+controller JVM on 127.0.0.1, with its data in `workdir`.

    Use as a context manager, or call `start()` and `stop()`.
    """

    def __init__(
        self,
        workdir: Path,
        jars: Path,
        java: str | None = None,
        sasl_users: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.jars = jars
        self.java = java or _java()
        self.port = free_port()
        self.controller_port = free_port()
        self.sasl_users = dict(sasl_users or {})
        """Users (name -> password) of a second listener, SASL_PLAINTEXT with mechanism PLAIN;
        the PLAINTEXT listener stays for the test's own clients (topics, producing)."""
        self.sasl_port = free_port() if self.sasl_users else None
        self.log_path = workdir / "server.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        """The `bootstrap.servers` value for clients of this broker."""
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap_servers(self) -> str:
        """The `bootstrap.servers` value of the SASL_PLAINTEXT listener (needs `sasl_users`)."""
        if self.sasl_port is None:
            raise BrokerSetupError("this broker has no SASL listener: pass sasl_users")
        return f"127.0.0.1:{self.sasl_port}"

    def start(self, timeout: float = 90.0) -> None:
        """Format the storage, start the JVM, and return once the broker serves metadata."""
        properties = self._write_config()
        self._format_storage(properties)
        self._log_file = self.log_path.open("ab")
        self._process = subprocess.Popen(
            [*self._java_command(), "kafka.Kafka", str(properties)],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # Only a pre-resolved libc call runs between fork and exec, so no lock is taken.
            preexec_fn=die_with_parent,  # noqa: PLW1509
        )
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop(grace=0)
            raise

    def stop(self, grace: float = 30.0) -> None:
        """Stop the broker: SIGTERM for a clean shutdown, SIGKILL after `grace` seconds."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def create_topic(self, name: str, partitions: int) -> None:
        """Create a topic and wait until every partition has a leader."""
        kafka_client.create_topic(self.bootstrap_servers, name, partitions)

    def add_partitions(self, name: str, partitions: int) -> None:
        """Grow a topic to ``partitions`` partitions (each with a leader on return)."""
        kafka_client.add_partitions(self.bootstrap_servers, name, partitions)

    def produce(
        self,
        topic: str,
        records: Sequence[tuple[Payload, Payload]],
        partition: int | None = None,
    ) -> None:
        """Write `records` (key, value); return once the broker acknowledged every one."""
        kafka_client.produce(self.bootstrap_servers, topic, records, partition)

    def end_offsets(self, topic: str) -> dict[int, int]:
        """The high watermark of every partition of `topic`."""
        return kafka_client.end_offsets(self.bootstrap_servers, topic)

    def consume_all(self, topic: str) -> list[ConsumedRecord]:
        """Every committed record of `topic`, in partition then offset order."""
        return kafka_client.consume_all(self.bootstrap_servers, topic)

    def _java_command(self) -> list[str]:
        return [
            self.java,
            *JVM_OPTIONS,
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp",
            f"{self.jars}/*",
        ]

    def _write_config(self) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "log4j2.properties").write_text(
            "status = warn\n"
            "appender.out.type = Console\n"
            "appender.out.name = OUT\n"
            "appender.out.layout.type = PatternLayout\n"
            "appender.out.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = INFO\n"
            "rootLogger.appenderRef.out.ref = OUT\n",
            encoding="utf-8",
        )
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.workdir / "data"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
        }
        if self.sasl_port is not None:
            settings["listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
            settings["advertised.listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
            settings["listener.security.protocol.map"] += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
            settings["sasl.enabled.mechanisms"] = "PLAIN"
            users = " ".join(
                f'user_{name}="{password}"' for name, password in self.sasl_users.items()
            )
            settings["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
            )
        properties = self.workdir / "server.properties"
        properties.write_text(
            "".join(f"{key}={value}\n" for key, value in settings.items()), encoding="utf-8"
        )
        return properties

    def _format_storage(self, properties: Path) -> None:
        result = subprocess.run(
            [
                *self._java_command(),
                "kafka.tools.StorageTool",
                "format",
                "--cluster-id",
                _random_cluster_id(),
                "--config",
                str(properties),
                "--ignore-formatted",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise BrokerFailedError(
                f"kafka storage format failed (exit {result.returncode}):\n"
                f"{result.stdout}\n{result.stderr}"
            )

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self._port_open():
            self._check_alive()
            if time.monotonic() > deadline:
                raise BrokerFailedError(self._failure(f"port {self.port} not open in {timeout}s"))
            time.sleep(0.1)
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        while True:
            self._check_alive()
            try:
                admin.describe_cluster(request_timeout=2).result(timeout=5)
                return
            except KafkaException:
                if time.monotonic() > deadline:
                    raise BrokerFailedError(self._failure("no cluster metadata")) from None
                time.sleep(0.2)

    def _port_open(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def _check_alive(self) -> None:
        if self._process is not None and self._process.poll() is not None:
            raise BrokerFailedError(self._failure(f"exited with {self._process.returncode}"))

    def _failure(self, what: str) -> str:
        log = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        tail = "\n".join(log[-40:])
        return f"Kafka broker on {self.bootstrap_servers} {what}; last log lines:\n{tail}"


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    candidate = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not candidate or not Path(candidate).is_file():
        raise BrokerSetupError("no java found (set JAVA_HOME or put java on PATH)")
    return candidate


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One broker per test session (per xdist worker); tests isolate by topic name."""
    with KafkaBroker(tmp_path_factory.mktemp("kafka"), broker_jars_dir()) as broker:
        yield broker
