"""The Spark and Hadoop settings a user may pass (``spec.sparkConf``, ``spec.hadoopConf``), and
the ones eo owns.

eo sets some keys itself because exactly-once or the pod layout depends on them: the master and
deploy mode, the driver's address and ports the Service exposes, the Kubernetes settings of
executor pods, the session time zone (instants are written as UTC), the task retry count the
failed-attempt clean-up expects, no speculation, the Python the writer tasks run, the jars.
Sizes have their own fields (``spec.driver``, ``spec.executors``), and a checkpoint store's
endpoint and credentials theirs (``spec.checkpoint.s3``). Credentials never go in a map of plain
strings: a key that names one is refused, so a secret cannot end up in the spec.
"""

from __future__ import annotations

from collections.abc import Mapping

MANAGED_SPARK = {
    "spark.master": "eo runs local mode or Spark on Kubernetes from spec.executors",
    "spark.submit.deployMode": "the driver runs in client mode inside its pod",
    "spark.app.name": "eo names the application after the pipeline",
    "spark.driver.host": "executors reach the driver through its Service",
    "spark.driver.bindAddress": "executors reach the driver through its Service",
    "spark.driver.port": "the driver Service exposes fixed ports",
    "spark.blockManager.port": "the driver Service exposes fixed ports",
    "spark.driver.blockManager.port": "the driver Service exposes fixed ports",
    "spark.ui.port": "the driver Service exposes the Spark UI at port 4040",
    "spark.driver.memory": "set spec.driver.memory",
    "spark.driver.cores": "set spec.driver.cores",
    "spark.executor.instances": "set spec.executors.instances",
    "spark.executor.cores": "set spec.executors.cores",
    "spark.executor.memory": "set spec.executors.memory",
    "spark.sql.session.timeZone": "instants are written as UTC; a session zone would shift them",
    "spark.sql.streaming.stopGracefullyOnShutdown": "a stop must end at a batch boundary",
    "spark.task.maxFailures": "the clean-up of failed writer attempts expects eo's retry count",
    "spark.speculation": "speculative writer attempts would prepare twice for nothing",
    "spark.pyspark.python": "writer tasks must run eo's own Python",
    "spark.pyspark.driver.python": "the driver runs eo's own Python",
    "spark.jars": "eo adds its JVM writer and the connector jars the source and checkpoint need",
}
MANAGED_SPARK_PREFIXES = {
    "spark.kubernetes.": "eo builds the driver and executor pods from spec.driver and "
    "spec.executors",
    "spark.hadoop.": "put Hadoop settings in spec.hadoopConf, without the spark.hadoop. prefix",
}
MANAGED_HADOOP = {
    "fs.s3a.endpoint": "set spec.checkpoint.s3.endpoint",
    "fs.s3a.endpoint.region": "set spec.checkpoint.s3.region",
    "fs.s3a.path.style.access": "set spec.checkpoint.s3.pathStyleAccess",
    "fs.s3a.aws.credentials.provider": "set spec.checkpoint.s3 keys, or none for the default chain",
}
SECRET_WORDS = ("secret", "password", "passwd", "token", "access.key", "credential", "sasl.jaas")
"""A key holding any of these is a credential: it belongs in a Secret, referenced by a field."""
KAFKA_CREDENTIAL_WORDS = (
    "sasl.jaas.config",
    "password",
    "passwd",
    "passphrase",
    "secret",
    "ssl.keystore.key",
)
"""A Kafka client option holding any of these (any case) carries a credential: the JAAS
configuration with its SASL password, key and store passwords, a PEM private key, OAuth client
secrets. It belongs in ``spec.source.kafka.secretOptions``, by reference. Narrower than
``SECRET_WORDS``: ``sasl.oauthbearer.token.endpoint.url`` is a URL, not a token."""
KAFKA_OWNED_OPTIONS = {
    "failondataloss": "eo always fails a batch whose offsets Kafka no longer has (retention, "
    "a deleted topic): with false Spark skips them silently, a gap in a ledger",
    "kafka.bootstrap.servers": "set spec.source.kafka.bootstrapServers",
    "subscribe": "set spec.source.kafka.topics",
    "subscribepattern": "set spec.source.kafka.topics (eo subscribes to named topics)",
    "assign": "set spec.source.kafka.topics (eo subscribes to named topics)",
    "startingoffsets": "set spec.source.kafka.startingOffsets",
    "maxoffsetspertrigger": "set spec.source.kafka.maxOffsetsPerTrigger",
}
"""Kafka reader options eo sets itself (Spark reads option names in any case): a user option
would silently override them, and ``failOnDataLoss: false`` would turn lost offsets into a gap."""
FILES_OWNED_OPTIONS = {
    "mode": "eo parses with FAILFAST and reads a batch holding a record that does not parse "
    "again, that record kept in the dead-letter table; DROPMALFORMED would drop it, a gap",
    "columnnameofcorruptrecord": "eo keeps every record that does not parse in the dead-letter "
    "table itself",
    "maxfilespertrigger": "set spec.source.files.maxFilesPerTrigger",
    "path": "set spec.source.files.path",
    "header": "eo reads csv files by their header line (columns by name); without one the first "
    "record of every file would be taken for a header and lost",
}
"""File reader options eo sets itself: a user's value was silently overridden (``mode``,
``header``) or fought eo's (``path``, ``maxFilesPerTrigger``)."""
KAFKA_OPTION_KEY_PATTERN = r"^kafka(\.[a-z0-9]+)+$"
"""Keys of ``secretOptions``: Kafka client settings as Spark's reader takes them (``kafka.``
and the lower-case dotted name); the only ones Spark passes on to the Kafka consumer."""
MAX_ENTRIES = 32
KEYS_PER_RULE = 8
"""Exact keys checked by one CEL rule, to stay well inside the per-rule cost budget."""


def refusals(field: str, conf: Mapping[str, str]) -> list[tuple[str, str]]:
    """(path, reason) for every key of ``spec.<field>`` eo owns or that holds a credential."""
    managed = MANAGED_SPARK if field == "sparkConf" else MANAGED_HADOOP
    prefixes = MANAGED_SPARK_PREFIXES if field == "sparkConf" else {}
    found = []
    for key in sorted(conf):
        path = field  # the key goes in the message: keys hold dots, paths split on them
        lowered = key.lower()
        if key in managed:
            found.append((path, f"key {key}: set by eo ({managed[key]}); remove it"))
        elif any(key.startswith(prefix) for prefix in prefixes):
            prefix = next(p for p in prefixes if key.startswith(p))
            found.append((path, f"key {key}: {prefix}* keys are set by eo; {prefixes[prefix]}"))
        elif any(word in lowered for word in SECRET_WORDS):
            found.append(
                (
                    path,
                    f"key {key} looks like a credential: credentials come only from Secrets "
                    "(e.g. spec.checkpoint.s3 keys by secretKeyRef), never as plain strings",
                )
            )
    return found


def cel_rules(field: str) -> list[str]:
    """The CRD's CEL rules for ``spec.<field>``: the same refusals, by the API server.

    Several rules (exact keys in groups, prefixes, credential words) because the API server
    budgets each rule's estimated cost.
    """
    managed = MANAGED_SPARK if field == "sparkConf" else MANAGED_HADOOP
    prefixes = MANAGED_SPARK_PREFIXES if field == "sparkConf" else {}
    keys = sorted(managed)
    rules = []
    for start in range(0, len(keys), KEYS_PER_RULE):
        listed = ", ".join(f"'{key}'" for key in keys[start : start + KEYS_PER_RULE])
        rules.append(f"!has(self.{field}) || self.{field}.all(k, !(k in [{listed}]))")
    if prefixes:
        starts = " && ".join(f"!k.startsWith('{prefix}')" for prefix in prefixes)
        rules.append(f"!has(self.{field}) || self.{field}.all(k, {starts})")
    words = " && ".join(f"!k.lowerAscii().contains('{word}')" for word in SECRET_WORDS)
    rules.append(f"!has(self.{field}) || self.{field}.all(k, {words})")
    return rules


def kafka_option_refusals(options: Mapping[str, str]) -> list[str]:
    """Why each key of ``spec.source.kafka.options`` that carries a credential is refused."""
    return [
        f"key {key} carries a credential: put its value in a Secret and reference it from "
        f"spec.source.kafka.secretOptions, e.g. {key}: {{secretKeyRef: {{name: SECRET, key: "
        "KEY}} (or env: VARIABLE for a local eo run); plain option values end up in the "
        "pipeline object, its ConfigMap and every copy of the spec"
        for key in sorted(options)
        if any(word in key.lower() for word in KAFKA_CREDENTIAL_WORDS)
    ]


def owned_refusals(options: Mapping[str, str], owned: Mapping[str, str]) -> list[str]:
    """Why each reader option that eo sets itself (``owned``: lower-case key -> the fix) is
    refused: Spark reads option names in any case, and one of them would either be overridden
    by eo without a word or override eo."""
    return [
        f"key {key} is set by eo: {owned[key.lower()]}"
        for key in sorted(options)
        if key.lower() in owned
    ]


def owned_cel_rule(owned: Mapping[str, str]) -> str:
    """The CRD's CEL rule for a source's ``options``: no key eo sets itself, in any case."""
    keys = ", ".join(f"'{key}'" for key in owned)
    return f"!has(self.options) || self.options.all(k, !(k.lowerAscii() in [{keys}]))"


def kafka_option_cel_rule() -> str:
    """The CRD's CEL rule for ``spec.source.kafka.options``: the same refusal."""
    words = " && ".join(f"!k.lowerAscii().contains('{word}')" for word in KAFKA_CREDENTIAL_WORDS)
    return f"!has(self.options) || self.options.all(k, {words})"
