"""Pydantic models of the ExactlyOncePipeline resource.

These models are the single source of truth: the CRD (``eo crd``), ``eo validate``, the operator
and the driver all read them. Attribute docstrings become field descriptions, and so
``kubectl explain exactlyoncepipeline.spec`` shows them. Cross-field rules live in
``model_validator``s here *and* as CEL rules in the CRD (see ``spec/crd.py``), so a bad object is
rejected by the API server before the operator ever sees it, and again by the operator for
objects that bypassed the schema (an older CRD, a local YAML file).
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, Strict, StringConstraints, model_validator
from pydantic.alias_generators import to_camel

from eo_jobs.spec import conf, pod_template

GROUP = "eo.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "ExactlyOncePipeline"
PLURAL = "exactlyoncepipelines"
SINGULAR = "exactlyoncepipeline"
SHORT_NAME = "eop"
EPOCH_ANNOTATION = f"{GROUP}/epoch"
NAME_MAX_LENGTH = 63
"""Longest pipeline name (``metadata.name``) the operator can serve: it is a label value."""
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A DNS subdomain, as the API server requires of a custom resource's name."""
NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""A DNS label, as the API server requires of a namespace."""

IDENTIFIER_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
TABLE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$"
MEMORY_PATTERN = r"^[1-9][0-9]*[kmgtKMGT]?$"
SINK_NAME_PATTERN = r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$"

Identifier = Annotated[str, StringConstraints(pattern=IDENTIFIER_PATTERN, max_length=63)]
COLUMN_PATTERN = r"^[^.`\"\x00]+$"
"""A column name as the table spells it (mixed case, spaces and reserved words are quoted by the
driver library): no dot or backtick, which Spark reads as a path or a quote in a column name,
and no double quote or NUL."""
ColumnName = Annotated[str, StringConstraints(pattern=COLUMN_PATTERN, max_length=63)]
TableName = Annotated[str, StringConstraints(pattern=TABLE_PATTERN, max_length=127)]
Memory = Annotated[str, StringConstraints(pattern=MEMORY_PATTERN, max_length=16)]


PROGRESS_MARGIN_SECONDS = 30
"""What restartPolicy.progressTimeoutSeconds needs above the longest batch and the trigger
interval: Spark reports an idle trigger every 10 s at most, the operator reads it every 10 s."""


def _rules(*rules: tuple[str, str, str]) -> dict[str, Any]:
    """CEL rules for the CRD (``x-kubernetes-validations``), mirroring a model validator."""
    return {
        "x-kubernetes-validations": [
            {"rule": rule, "message": message, "fieldPath": path} for rule, message, path in rules
        ]
    }


class FieldError(ValueError):
    """A cross-field error that belongs to one named field (so messages can point at it)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class Model(BaseModel):
    """Base: camelCase on the wire, unknown fields rejected, attribute docstrings as docs.

    Strict: a scalar has the JSON type the CRD declares ("3" is not an integer, "yes" not a
    boolean), because the API server refuses what pydantic's lax mode would convert.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
        frozen=True,
        strict=True,
    )


class Guarantee(enum.StrEnum):
    """Delivery guarantee of a pipeline's sinks."""

    EXACTLY_ONCE = "exactly-once"
    IDEMPOTENT = "idempotent"
    AT_LEAST_ONCE = "at-least-once"


class SecretKeyRef(Model):
    """A key of a Kubernetes Secret in the pipeline's namespace."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    """Name of the Secret."""
    key: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    """Key inside the Secret whose value is the credential."""


class CredentialRef(Model):
    """Where a credential comes from. Literal secrets are not accepted in a spec, on purpose."""

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "has(self.secretKeyRef) != has(self.env)",
                "set exactly one of secretKeyRef or env",
                ".secretKeyRef",
            )
        )
    )

    secret_key_ref: SecretKeyRef | None = None
    """A Secret key (on Kubernetes). The operator passes it to the driver as an env variable."""
    env: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] | None = None
    """The name of an environment variable holding the value (for local runs)."""

    @model_validator(mode="after")
    def _exactly_one(self) -> CredentialRef:
        if (self.secret_key_ref is None) == (self.env is None):
            raise FieldError(
                "secretKeyRef",
                "set exactly one of secretKeyRef {name, key} (Kubernetes) or env: VARIABLE "
                "(local runs); literal connection strings are not accepted",
            )
        return self


class FilesSource(Model):
    """Files appearing in a folder (local path or any Hadoop-compatible URI)."""

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                conf.owned_cel_rule(conf.FILES_OWNED_OPTIONS),
                "options may not set what eo sets itself: mode and columnNameOfCorruptRecord "
                "(records that do not parse become dead letters), header (csv files are read by "
                "their header line), path and maxFilesPerTrigger (use the fields)",
                ".options",
            ),
        )
    )

    path: Annotated[str, StringConstraints(min_length=1)]
    """Folder that Spark watches for new files."""
    format: Literal["json", "csv", "parquet"]
    """File format: json (one object per line), csv (with header) or parquet."""
    schema_: Annotated[str, StringConstraints(min_length=1)] = Field(alias="schema")
    """Spark DDL schema of a record, e.g. "order_id BIGINT, merchant STRING, amount BIGINT"."""
    max_files_per_trigger: Annotated[int, Field(ge=1)] | None = None
    """At most this many new files per micro-batch (Spark's maxFilesPerTrigger)."""
    options: Annotated[dict[str, str], Field(max_length=conf.MAX_ENTRIES)] = Field(
        default_factory=dict
    )
    """Extra Spark reader options (e.g. multiLine, timestampFormat, recursiveFileLookup).
    Options eo sets itself are refused: mode and columnNameOfCorruptRecord (records that do not
    parse become dead letters), header (csv files are read by their header line), path and
    maxFilesPerTrigger (use their fields)."""

    @model_validator(mode="after")
    def _no_owned_options(self) -> FilesSource:
        refused = conf.owned_refusals(self.options, conf.FILES_OWNED_OPTIONS)
        if refused:
            raise FieldError("options", refused[0])
        return self


class KafkaSource(Model):
    """Kafka topics read with Spark's Kafka connector; offsets live in the Spark checkpoint."""

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                conf.kafka_option_cel_rule(),
                "options may not carry credentials (sasl.jaas.config, passwords, secrets, "
                "private keys): put the value in a Secret and reference it from "
                "secretOptions: {KEY: {secretKeyRef: {name: SECRET, key: KEY}}}",
                ".options",
            ),
            (
                conf.owned_cel_rule(conf.KAFKA_OWNED_OPTIONS),
                "options may not set what eo sets itself: failOnDataLoss (always true), "
                "kafka.bootstrap.servers, subscribe, subscribePattern, assign, startingOffsets, "
                "maxOffsetsPerTrigger; use the fields bootstrapServers, topics, startingOffsets "
                "and maxOffsetsPerTrigger",
                ".options",
            ),
            (
                "!has(self.secretOptions) || self.secretOptions.all(k, "
                f"k.matches('{conf.KAFKA_OPTION_KEY_PATTERN.replace(chr(92), chr(92) * 2)}'))",
                "secretOptions keys are Kafka client settings as Spark's reader takes them: "
                "kafka. and the lower-case dotted name, e.g. kafka.sasl.jaas.config",
                ".secretOptions",
            ),
            (
                "!has(self.secretOptions) || !has(self.options) || "
                "self.secretOptions.all(k, !(k in self.options))",
                "a key may be in options or in secretOptions, not in both",
                ".secretOptions",
            ),
        )
    )

    bootstrap_servers: Annotated[str, StringConstraints(min_length=1)]
    """Comma-separated host:port list of brokers."""
    topics: Annotated[list[Annotated[str, StringConstraints(min_length=1)]], Field(min_length=1)]
    """Topics to subscribe to."""
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    """Where a brand-new query starts; a restarted query always resumes from its checkpoint."""
    max_offsets_per_trigger: Annotated[int, Field(ge=1)] | None = None
    """At most this many records per micro-batch across all partitions."""
    format: Literal["json", "csv"] = "json"
    """Encoding of the record value."""
    schema_: Annotated[str, StringConstraints(min_length=1)] = Field(alias="schema")
    """Spark DDL schema of the decoded record value."""
    options: Annotated[dict[str, str], Field(max_length=conf.MAX_ENTRIES)] = Field(
        default_factory=dict
    )
    """Extra options passed to the Kafka source (e.g. kafka.security.protocol,
    kafka.sasl.mechanism). Options that carry credentials are refused: use secretOptions.
    Options eo sets itself are refused too: failOnDataLoss (always true: lost offsets fail the
    batch instead of becoming a gap), kafka.bootstrap.servers, subscribe, subscribePattern,
    assign, startingOffsets and maxOffsetsPerTrigger (use their fields)."""
    secret_options: Annotated[dict[str, CredentialRef], Field(max_length=conf.MAX_ENTRIES)] = Field(
        default_factory=dict
    )
    """Kafka options whose values are credentials, each by reference: e.g.
    kafka.sasl.jaas.config, kafka.ssl.truststore.password, kafka.ssl.keystore.password,
    kafka.ssl.key.password. The operator passes a secretKeyRef to the driver as an environment
    variable (never into the spec's ConfigMap); the driver hands the value to Spark's reader."""

    @model_validator(mode="after")
    def _credentials_by_reference(self) -> KafkaSource:
        refused = conf.kafka_option_refusals(self.options) + conf.owned_refusals(
            self.options, conf.KAFKA_OWNED_OPTIONS
        )
        if refused:
            raise FieldError("options", refused[0])
        for key in sorted(self.secret_options):
            if not re.fullmatch(conf.KAFKA_OPTION_KEY_PATTERN, key):
                raise FieldError(
                    "secretOptions",
                    f"key {key}: secretOptions keys are Kafka client settings as Spark's reader "
                    "takes them: kafka. and the lower-case dotted name, e.g. "
                    "kafka.sasl.jaas.config",
                )
            if key in self.options:
                raise FieldError(
                    "secretOptions",
                    f"key {key} is in both options and secretOptions: keep it only in "
                    "secretOptions",
                )
        return self


class Source(Model):
    """The pipeline's input: exactly one of files or kafka."""

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "has(self.files) != has(self.kafka)",
                "set exactly one source: files or kafka",
                ".files",
            )
        )
    )

    files: FilesSource | None = None
    """Read files from a folder."""
    kafka: KafkaSource | None = None
    """Read Kafka topics."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Source:
        if (self.files is None) == (self.kafka is None):
            raise FieldError("files", "set exactly one source: files {...} or kafka {...}")
        return self


class Transform(Model):
    """A Spark SQL query over the view named ``source`` (the parsed input records)."""

    sql: Annotated[str, StringConstraints(min_length=1)]
    """The query, e.g. "SELECT order_id, amount_cents FROM source WHERE amount_cents > 0"."""


class PostgresSink(Model):
    """A PostgreSQL table written with a fenced two-phase commit (in exactly-once mode)."""

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "self.mode != 'upsert' || (has(self.keyColumns) && size(self.keyColumns) > 0)",
                "mode upsert needs keyColumns (the columns of a unique key of the table)",
                ".keyColumns",
            ),
            (
                "self.mode == 'upsert' || !has(self.versionColumn)",
                "versionColumn only applies to mode upsert",
                ".versionColumn",
            ),
            (
                "self.mode != 'accumulate' || (has(self.keyColumns) && size(self.keyColumns) > 0"
                " && has(self.addColumns) && size(self.addColumns) > 0)",
                "mode accumulate needs keyColumns (a unique key of the table) and addColumns "
                "(the numeric columns each batch adds to)",
                ".addColumns",
            ),
            (
                "self.mode == 'accumulate' || !has(self.addColumns)",
                "addColumns only applies to mode accumulate",
                ".addColumns",
            ),
            (
                "!has(self.addColumns) || !has(self.keyColumns)"
                " || self.addColumns.all(c, !(c in self.keyColumns))",
                "a column cannot be both a key column and an add column",
                ".addColumns",
            ),
            (
                "self.mode != 'upsert' || !has(self.sumColumns) || size(self.sumColumns) == 0",
                "sumColumns does not apply to mode upsert: an upsert replaces rows, so the "
                "table's sums do not move by the batch's",
                ".sumColumns",
            ),
            (
                "self.mode != 'accumulate' || !has(self.sumColumns)"
                " || self.sumColumns.all(c, has(self.addColumns) && c in self.addColumns)",
                "in mode accumulate sumColumns must be among addColumns (only they move by "
                "the batch's sums)",
                ".sumColumns",
            ),
            (
                "self.mode == 'append' || !has(self.auditColumn)",
                "auditColumn only applies to mode append: an upsert or accumulate row holds "
                "several batches' records, so no single batch id describes it",
                ".auditColumn",
            ),
        )
    )

    dsn: CredentialRef
    """libpq connection string (URI or key=value) of the target database, by reference."""
    table: TableName
    """Target table as schema.table; it must exist and be a logged (not UNLOGGED) table."""
    mode: Literal["append", "upsert", "accumulate"] = "append"
    """append inserts every record; upsert inserts or updates by keyColumns (see versionColumn);
    accumulate adds each batch's sums per key onto the table's row of the key (addColumns),
    creating it when absent: a running total, exact because each batch is committed once
    (exactly-once only: a replay under another guarantee would add twice)."""
    key_columns: list[ColumnName] = Field(default_factory=list, max_length=16)
    """Columns of a unique key of the table; required for modes upsert and accumulate. A record
    with a NULL key goes to the dead-letter table (a unique index never matches NULL)."""
    add_columns: list[ColumnName] = Field(default_factory=list, max_length=16)
    """Mode accumulate only: the numeric columns (integer, bigint, numeric) summed per key over
    the batch and added onto the stored row (a stored NULL counts as 0). A record with a NULL
    in one of them goes to the dead-letter table rather than adding nothing unseen. The rows
    written hold keyColumns and addColumns only."""
    sum_columns: list[ColumnName] = Field(default_factory=list, max_length=16)
    """Exactly-once, append or accumulate: numeric columns whose exact sum over the rows each
    batch writes here eo computes in Spark before writing and stores with the batch's decision,
    so the audit can check the table against it (per batch with a batch column, else the
    table's whole sum for an append-only or accumulate table): e.g. [amount_cents]."""
    audit_column: ColumnName | None = None
    """Append only: a bigint column of the table that eo fills with each row's batch id (the
    pipeline's rows must not have a column of that name). The continuous audit then checks, per
    batch, that the table holds exactly the rows the batch's decision says were written, and
    names the batch of a row deleted or inserted twice (the batch-column check; with
    sumColumns, the per-batch sums too). Rows other writers add (NULL in it) are not counted,
    so the table need not be declared in audit.appendOnly. Add it with e.g.
    ALTER TABLE public.payments ADD COLUMN eo_batch bigint, and an index on it if the table
    is large (each audit pass counts the rows above its position)."""
    version_column: ColumnName | None = None
    """Upsert only: among rows with the same key, in a batch and across batches, the one with
    the highest value wins; NULL is older than any value, and among equal versions the later
    row wins. Without it the winner among rows of one key in one batch is undefined (Spark's
    shuffle does not keep source order): set it whenever a key can change twice."""
    writer_partitions: Annotated[int, Field(ge=1, le=256)] = 2
    """Writer tasks (and so prepared transactions) per batch for this sink."""
    on_refused_record: Literal["deadLetter", "fail"] = "deadLetter"
    """A record the table refuses (NOT NULL, varchar(n) length, CHECK, foreign key, unique
    index, a date or character the database cannot hold: SQLSTATE class 22 or 23): deadLetter
    stores it in the dead-letter table of the sink's database, with the database's SQLSTATE,
    column and message, and writes the rest of the batch; fail stops the pipeline with the
    batch, the column and the database's message."""

    @model_validator(mode="after")
    def _upsert_needs_keys(self) -> PostgresSink:
        if self.mode == "upsert" and not self.key_columns:
            raise FieldError(
                "keyColumns",
                "mode upsert needs keyColumns: list the columns of the table's primary or "
                "unique key, e.g. keyColumns: [order_id]",
            )
        if self.mode != "upsert" and self.version_column is not None:
            raise FieldError("versionColumn", "versionColumn only applies to mode upsert")
        if self.mode == "accumulate" and not (self.key_columns and self.add_columns):
            missing = "keyColumns" if not self.key_columns else "addColumns"
            raise FieldError(
                missing,
                "mode accumulate needs keyColumns (the columns of the table's primary or unique "
                "key) and addColumns (the numeric columns each batch adds to), e.g. keyColumns: "
                "[merchant, day], addColumns: [volume_cents, payments]",
            )
        if self.mode != "accumulate" and self.add_columns:
            raise FieldError("addColumns", "addColumns only applies to mode accumulate")
        if self.mode != "append" and self.audit_column is not None:
            raise FieldError(
                "auditColumn",
                f"auditColumn only applies to mode append (this sink is mode {self.mode}): an "
                "upsert or accumulate row holds several batches' records; remove auditColumn",
            )
        if self.mode == "upsert" and self.sum_columns:
            raise FieldError(
                "sumColumns",
                "sumColumns does not apply to mode upsert: an upsert replaces rows, so the "
                "table's sums do not move by the batch's",
            )
        if self.mode == "accumulate" and (
            extra := sorted(set(self.sum_columns) - set(self.add_columns))
        ):
            raise FieldError(
                "sumColumns",
                f"{', '.join(extra)}: in mode accumulate sumColumns must be among addColumns "
                "(only they move by the batch's sums)",
            )
        both = sorted(set(self.key_columns) & set(self.add_columns))
        if both:
            raise FieldError(
                "addColumns",
                f"{', '.join(both)} cannot be both a key column and an add column; a key "
                "names the row, an add column is summed into it",
            )
        return self


class MySqlSink(Model):
    """A MySQL or MariaDB (InnoDB) table written with XA branches under the same fenced decision.

    The same shape as ``postgres`` for what both databases do alike; running totals
    (``accumulate``), ``sumColumns`` and ``auditColumn`` are PostgreSQL-only for now, so they
    are not fields here (the properties below answer "none" to the code that reads any sink).
    """

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "self.mode != 'upsert' || (has(self.keyColumns) && size(self.keyColumns) > 0)",
                "mode upsert needs keyColumns (the columns of the table's primary or unique key)",
                ".keyColumns",
            ),
            (
                "self.mode == 'upsert' || !has(self.versionColumn)",
                "versionColumn only applies to mode upsert",
                ".versionColumn",
            ),
        )
    )

    dsn: CredentialRef
    """mysql://user:password@host:3306/database (mariadb:// too) of the target database, by
    reference."""
    table: TableName
    """Target table as database.table; it must exist and be InnoDB (``eo check-sinks`` says
    why and how otherwise)."""
    mode: Literal["append", "upsert"] = "append"
    """append inserts every record; upsert inserts or updates by keyColumns (see
    versionColumn), with INSERT ... ON DUPLICATE KEY UPDATE."""
    key_columns: list[ColumnName] = Field(default_factory=list, max_length=16)
    """Columns of the table's primary or unique key; required for mode upsert."""
    version_column: ColumnName | None = None
    """Upsert only: among rows with the same key the one with the highest value wins; NULL is
    older than any value, and among equal versions the later row wins (as for postgres)."""
    writer_partitions: Annotated[int, Field(ge=1, le=256)] = 2
    """Writer tasks (and so prepared XA branches) per batch for this sink."""
    on_refused_record: Literal["deadLetter", "fail"] = "deadLetter"
    """A record the table refuses (NOT NULL, a value too long or out of range in strict mode,
    a bad date, CHECK, duplicate or foreign key): deadLetter stores it in the dead-letter table
    of the sink's database with the server's error code and message; fail stops the pipeline
    naming the batch."""

    @property
    def add_columns(self) -> list[str]:
        """Mode accumulate is PostgreSQL-only: none."""
        return []

    @property
    def sum_columns(self) -> list[str]:
        """sumColumns is PostgreSQL-only: none."""
        return []

    @property
    def audit_column(self) -> str | None:
        """auditColumn is PostgreSQL-only: none."""
        return None

    @model_validator(mode="after")
    def _upsert_needs_keys(self) -> MySqlSink:
        if self.mode == "upsert" and not self.key_columns:
            raise FieldError(
                "keyColumns",
                "mode upsert needs keyColumns: list the columns of the table's primary or "
                "unique key, e.g. keyColumns: [order_id]",
            )
        if self.mode != "upsert" and self.version_column is not None:
            raise FieldError("versionColumn", "versionColumn only applies to mode upsert")
        return self


TableSink: TypeAlias = PostgresSink | MySqlSink
"""What every sink kind has alike (dsn, table, mode, keys, partitions, refusals)."""
SINK_MODE = "(has(s.postgres) ? s.postgres.mode : s.mysql.mode)"
"""CEL: the mode of sink ``s``, whichever kind it is."""


class ControlDatabase(Model):
    """The database that holds the pipeline's fence and decision log: its commit point."""

    dsn: CredentialRef
    """libpq connection string of the control database, by reference. It may be one of the
    sinks' databases or another one; it cannot change once the pipeline exists, because the
    decisions it holds are what keeps a replay from writing a decided batch again."""


DEAD_LETTER_SINK = "eo-dead-letter"
"""The participant name of the dead-letter table: no sink may take it."""


class SinkSpec(Model):
    """One output of the pipeline. Every sink shows batch N together or not at all."""

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                f"self.name != '{DEAD_LETTER_SINK}'",
                f"sink name {DEAD_LETTER_SINK} is reserved for the dead-letter table; "
                "choose another name",
                ".name",
            ),
            (
                "has(self.postgres) != has(self.mysql)",
                "set exactly one of postgres (a PostgreSQL table) or mysql (a MySQL or MariaDB "
                "table)",
                ".postgres",
            ),
        )
    )

    name: Annotated[str, StringConstraints(pattern=SINK_NAME_PATTERN, max_length=32)]
    """Short DNS-style name, unique in the pipeline (used in transaction ids and metrics)."""
    postgres: PostgresSink | None = None
    """A PostgreSQL table (set exactly one of postgres and mysql)."""
    mysql: MySqlSink | None = None
    """A MySQL or MariaDB table (set exactly one of postgres and mysql)."""
    transform: Transform | None = None
    """This sink's own Spark SQL query over the view ``source``, which here holds the
    pipeline's output rows (after spec.transform, if set), e.g. a per-key aggregate for a
    mode accumulate sink beside a sink of the rows themselves. Every sink still shows batch N
    together or not at all; without it the sink gets the pipeline's output as is."""

    @property
    def target(self) -> TableSink:
        """The sink's table, whichever database kind holds it."""
        target = self.postgres if self.postgres is not None else self.mysql
        assert target is not None, "validated: exactly one of postgres and mysql"
        return target

    @property
    def kind(self) -> Literal["postgres", "mysql"]:
        """The spec's field name of the sink's kind (also its place in field paths)."""
        return "postgres" if self.postgres is not None else "mysql"

    @model_validator(mode="after")
    def _one_kind(self) -> SinkSpec:
        if (self.postgres is None) == (self.mysql is None):
            raise FieldError(
                "postgres",
                "set exactly one of postgres (a PostgreSQL table) or mysql (a MySQL or "
                "MariaDB table)",
            )
        return self

    @model_validator(mode="after")
    def _not_reserved(self) -> SinkSpec:
        if self.name == DEAD_LETTER_SINK:
            raise FieldError(
                "name",
                f"sink name {DEAD_LETTER_SINK} is reserved for the dead-letter table (its "
                "transactions would collide with this sink's); choose another name",
            )
        return self


class DeadLetter(Model):
    """Where records that fail to parse or to transform go, inside the same decided batch."""

    table: TableName | None = None
    """schema.table for dead letters; default: the first sink's table + "_dead_letter"."""


class S3Store(Model):
    """How the driver reaches the S3-compatible store of an ``s3a://`` checkpoint location.

    Without credentials, Hadoop S3A's default chain is used (web identity for IRSA, the pod's
    instance profile, AWS_* variables).
    """

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "has(self.accessKeyId) == has(self.secretAccessKey)",
                "set both accessKeyId and secretAccessKey, or neither (default credential chain)",
                ".accessKeyId",
            )
        )
    )

    endpoint: Annotated[str, StringConstraints(pattern=r"^https?://[^\s]+$")] | None = None
    """Endpoint URL of an S3-compatible store (MinIO, Ceph, a test server); default: AWS."""
    region: Annotated[str, StringConstraints(pattern=r"^[a-z0-9-]+$", max_length=32)] | None = None
    """Signing region, e.g. eu-west-1 (AWS needs it unless the endpoint implies it)."""
    path_style_access: bool = False
    """Address buckets as endpoint/bucket instead of bucket.endpoint (most non-AWS stores)."""
    access_key_id: CredentialRef | None = None
    """Access key id, by reference (passed to the driver as AWS_ACCESS_KEY_ID)."""
    secret_access_key: CredentialRef | None = None
    """Secret access key, by reference (passed to the driver as AWS_SECRET_ACCESS_KEY)."""

    @model_validator(mode="after")
    def _both_keys_or_none(self) -> S3Store:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise FieldError(
                "accessKeyId",
                "set both accessKeyId and secretAccessKey, or neither to use the default "
                "credential chain (IRSA, instance profile)",
            )
        return self


S3_SCHEME = "s3a://"


class Checkpoint(Model):
    """Spark's checkpoint: offsets and commit log. Losing it is detected, never ignored."""

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "!has(self.s3) || self.location.startsWith('s3a://')",
                "s3 settings apply only to an s3a:// location",
                ".s3",
            ),
            (
                "!self.location.startsWith('s3://') && !self.location.startsWith('s3n://')",
                "use the s3a:// scheme (Hadoop's S3A file system) for an S3 location",
                ".location",
            ),
        )
    )

    location: Annotated[str, StringConstraints(min_length=1)]
    """Durable folder or URI for the checkpoint: a PersistentVolume path, or s3a://bucket/path
    (Hadoop's S3A is in the image; other schemes need their Hadoop file system on the class
    path)."""
    trigger_interval_seconds: Annotated[int, Field(ge=0, le=86400)] = 10
    """Seconds between micro-batches; 0 means as fast as possible."""
    s3: S3Store | None = None
    """Endpoint, region and credentials of an s3a:// location."""

    @model_validator(mode="after")
    def _s3_settings_fit_the_location(self) -> Checkpoint:
        if self.location.startswith(("s3://", "s3n://")):
            raise FieldError(
                "location",
                f"use the s3a:// scheme (Hadoop's S3A file system), e.g. "
                f"s3a://{self.location.split('://', 1)[1]}",
            )
        if self.s3 is not None and not self.location.startswith(S3_SCHEME):
            raise FieldError("s3", "s3 settings apply only to an s3a:// checkpoint location")
        return self


EXECUTOR_CONTAINER = "executor"
"""The executor template's main container (spark.kubernetes.executor.podTemplateContainerName)."""


class PodMetadata(Model):
    """Labels and annotations a pod template adds (eo.dev/* keys are eo's)."""

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "!has(self.labels) || self.labels.all(k, !k.startsWith('eo.dev/'))",
                "eo.dev/* labels are eo's own",
                ".labels",
            ),
            (
                "!has(self.annotations) || self.annotations.all(k, !k.startsWith('eo.dev/'))",
                "eo.dev/* annotations are eo's own",
                ".annotations",
            ),
        )
    )

    labels: Annotated[dict[str, str], Field(max_length=32)] = Field(default_factory=dict)
    """Added to the pod's labels."""
    annotations: Annotated[dict[str, str], Field(max_length=32)] = Field(default_factory=dict)
    """Added to the pod's annotations."""


class PodTemplate(Model):
    """A partial pod merged into the pod eo generates: scheduling (nodeSelector, tolerations,
    affinity, topologySpreadConstraints, priorityClassName), imagePullSecrets, extra volumes,
    init containers and sidecars, the main container's env/envFrom/volumeMounts/resources, and
    a tighter securityContext. What eo owns is refused, naming the field."""

    metadata: PodMetadata = Field(default_factory=PodMetadata)
    """Labels and annotations."""
    spec: dict[str, Any] = Field(
        default_factory=dict, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )
    """Fields of a PodSpec (Kubernetes' own schema; see the class description for which)."""

    def refused(self, main: str) -> list[tuple[str, str]]:
        """What this template may not do (path below podTemplate, reason)."""
        return pod_template.refusals(self.model_dump(by_alias=True), main)


class Driver(Model):
    """The Spark driver pod."""

    cores: Annotated[int, Field(ge=1, le=64)] = 1
    """CPU cores requested for the driver (also local[cores] when executors.instances is 0)."""
    memory: Memory = "1g"
    """Driver JVM memory, Spark style (512m, 2g)."""
    image: str | None = None
    """Job image; default: the image configured in the operator."""
    service_account: str | None = None
    """ServiceAccount of the driver pod (needs pod create rights when executors.instances > 0)."""
    metrics_port: Annotated[int, Field(ge=1024, le=65535)] = 9108
    """Port of the driver's Prometheus endpoint."""
    volume_claim: Annotated[str, StringConstraints(min_length=1, max_length=253)] | None = None
    """PersistentVolumeClaim mounted at volumeMountPath (checkpoint and file sources live there)."""
    volume_mount_path: Annotated[str, StringConstraints(pattern=r"^/.*")] = "/data"
    """Where the volumeClaim is mounted in the driver pod."""
    pod_template: PodTemplate | None = None
    """Partial pod merged into the driver pod (labels, scheduling, sidecars, ...)."""

    @model_validator(mode="after")
    def _template_allowed(self) -> Driver:
        if self.pod_template is not None:
            refused = self.pod_template.refused("driver")
            if refused:
                path, reason = refused[0]
                raise FieldError(f"podTemplate.{path}", reason)
        return self


class Executors(Model):
    """Spark executors; 0 instances runs the writers inside the driver (local mode)."""

    instances: Annotated[int, Field(ge=0, le=1000)] = 0
    """Executor pods; 0 = local mode inside the driver pod."""
    cores: Annotated[int, Field(ge=1, le=64)] = 1
    """Cores per executor."""
    memory: Memory = "1g"
    """Memory per executor, Spark style."""
    pod_template: PodTemplate | None = None
    """Partial pod Spark merges into each executor pod (its main container is named
    executor); the same rules as the driver's template."""

    @model_validator(mode="after")
    def _template_allowed(self) -> Executors:
        if self.pod_template is not None:
            refused = self.pod_template.refused(EXECUTOR_CONTAINER)
            if refused:
                path, reason = refused[0]
                raise FieldError(f"podTemplate.{path}", reason)
        return self


class RestartPolicy(Model):
    """How the operator relaunches a failed driver."""

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "self.maxBackoffSeconds >= self.backoffSeconds",
                "maxBackoffSeconds must be >= backoffSeconds",
                ".maxBackoffSeconds",
            )
        )
    )

    max_restarts: Annotated[int, Field(ge=0, le=1000)] = 5
    """Restarts allowed inside the window before the pipeline is marked Failed."""
    backoff_seconds: Annotated[int, Field(ge=1, le=3600)] = 10
    """First backoff; doubled per consecutive failure, with jitter."""
    max_backoff_seconds: Annotated[int, Field(ge=1, le=86400)] = 300
    """Cap of the backoff."""
    window_seconds: Annotated[int, Field(ge=60, le=604800)] = 3600
    """A driver that runs this long without failing resets the restart counter."""
    start_timeout_seconds: Annotated[int, Field(ge=30, le=86400)] = 600
    """A driver pod still Pending after this long (image pull failing, unschedulable, a
    missing Secret key, a volume attached elsewhere) counts as a failed start: it is deleted
    and relaunched with a new epoch after the backoff, with its waiting reason in
    status.lastFailure."""
    keep_failed_pods: Annotated[int, Field(ge=0, le=10)] = 1
    """Failed driver pods kept for their logs and termination message (the newest ones; older
    ones are deleted). They hold no CPU or memory; 0 deletes a failed driver at once."""
    progress_timeout_seconds: Annotated[int, Field(ge=0, le=604800)] | None = None
    """A Running driver that made no progress for this long is hung: it is deleted and relaunched
    with a new epoch after the backoff (a batch it may still run is fenced), a counted restart
    with reason DriverHung. Progress is a trigger the driver reports on its metrics endpoint
    (after each batch; while idle, every trigger interval or 10 s, whichever is longer), a
    decided batch, or its launch. No heartbeat comes while a batch runs, so this must exceed
    the longest legitimate batch: at least alerts.maxCheckpointDurationSeconds +
    checkpoint.triggerIntervalSeconds + 30. Unset: twice the sum of those two, at least 600
    (620 with the defaults). 0: off. Only a driver whose endpoint answered the operator is
    judged: one it never reached is alerted on (EoNoRecentCommit), not restarted."""
    rollback_after_seconds: Annotated[int, Field(ge=60, le=604800)] | None = None
    """Automatic rollback, off when unset: a new spec (a spec hash other than
    status.lastStable's) whose driver is not stable (Running, and a batch decided with its own
    epoch) this many seconds after its first launch is replaced by the last stable spec: its
    driver is stopped at a batch boundary (or was not running) and the last stable spec is
    relaunched with a new epoch, condition RolledBack names the generation rolled back from, a
    Warning RolledBack event. It stays rolled back until the spec is edited again (any edit;
    reverting to the last stable spec ends it too); a spec that never ran stable has nothing
    to roll back to. Only the operator reads it."""

    @model_validator(mode="after")
    def _cap_not_below_start(self) -> RestartPolicy:
        if self.max_backoff_seconds < self.backoff_seconds:
            raise FieldError(
                "maxBackoffSeconds",
                f"maxBackoffSeconds ({self.max_backoff_seconds}) must be >= backoffSeconds "
                f"({self.backoff_seconds})",
            )
        return self


class Alerts(Model):
    """Thresholds of the shipped alert rules, exported per pipeline by the operator."""

    max_checkpoint_duration_seconds: Annotated[int, Field(ge=1)] = 300
    """Alert when a batch (prepare + decide + commit) takes longer than this."""
    max_failure_rate_percent: Annotated[float, Field(ge=0, le=100)] = 5.0
    """Alert when more than this percentage of batch attempts fail over 15 minutes."""
    no_commit_floor_seconds: Annotated[int, Field(ge=1, le=86400)] = 300
    """The no-commit alert fires after max(2 x trigger interval, this many seconds)."""


class Audit(Model):
    """The operator's continuous audit of this pipeline's exactly-once evidence (docs/audit.md).

    Only the operator reads it: editing it never restarts the driver.
    """

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "!has(self.batchColumns) || self.batchColumns.all(s, "
                "has(self.appendOnly) && s in self.appendOnly)",
                "a sink in audit.batchColumns must also be in audit.appendOnly (rows per batch "
                "can only be counted in a table eo alone appends to)",
                ".batchColumns",
            ),
        )
    )

    enabled: bool = True
    """false stops auditing this pipeline (its Audited condition and eo_audit_* metrics go)."""
    interval_seconds: Annotated[int, Field(ge=10, le=86400)] | None = None
    """Seconds between two audit passes; unset: the operator's default (the chart value
    operator.auditIntervalSeconds, 300). Markers are kept a day, so an interval above that
    would let the audit miss participants."""
    max_batches_per_pass: Annotated[int, Field(ge=1, le=100000)] = 5000
    """Decided batches one pass reads at most (per streaming query): a pass costs about 0.5 ms
    per batch, so this bounds it however far behind the audit is; the rest waits for the next
    pass."""
    append_only: Annotated[
        list[Annotated[str, StringConstraints(min_length=1)]], Field(max_length=8)
    ] = Field(default_factory=list)
    """Sinks whose table only this pipeline writes, and only appends to: their row count is
    checked against the decisions (the table-count check; not run otherwise, since eo cannot
    see other writers). Upsert sinks cannot be listed."""
    batch_columns: Annotated[dict[str, ColumnName], Field(max_length=8)] = Field(
        default_factory=dict
    )
    """Sink name -> a column of the pipeline's rows holding each row's batch id: rows per batch
    are checked, and a count difference names its batch (the batch-column check). The sink must
    be appendOnly. Simpler: let eo write the batch id (the sink's postgres.auditColumn)."""


NONCE_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""A lifecycle nonce: it names a folder of the checkpoint (``eo-snapshots/<kind>-<nonce>``)."""
Nonce = Annotated[str, StringConstraints(pattern=NONCE_PATTERN, min_length=1, max_length=40)]


class SnapshotRequest(Model):
    """Take a snapshot: a copy of the checkpoint and of the decision log's position."""

    nonce: Nonce
    """Change it to take a snapshot (one per nonce: a nonce already taken is not taken again).
    The driver is stopped at a batch boundary like for any spec change, the operator raises the
    fence and resolves the in-doubt transactions, and the next driver, before its query starts,
    copies the checkpoint to <checkpoint.location>/eo-snapshots/snapshot-<nonce> with
    eo-snapshot.json (query id, last decided batch and its epoch, last batch Spark committed)
    and records it in the control database; status.lifecycle.snapshots lists it. Nothing is
    written to the sinks by it: the sink stays exact through it."""


class StartOver(Model):
    """Start the pipeline over: a new streaming query, with its own decision log."""

    nonce: Nonce
    """Change it to start over (once per nonce). The driver is stopped at a batch boundary, the
    operator raises the fence and resolves the in-doubt transactions, and the next driver,
    before its query starts, moves the checkpoint's Spark files to
    <checkpoint.location>/eo-snapshots/start-over-<nonce> (kept as a snapshot) and deletes the
    decisions of every earlier query of the pipeline, in one transaction with the record of
    the start-over (what `eo forget-query` does by hand). Rows already written stay in the
    sinks; the new query reads from the source's starting point (a files source: every file
    in source.files.path; kafka: source.kafka.startingOffsets), so whatever the old query
    already wrote and the source still holds is written again. That is refused unless
    allowReread is true: a files source whose folder still holds a file the old query read,
    unchanged (the modification time Spark logged), stops the driver (exit 79, phase Failed,
    reason StartOverRefused) before anything moves; a kafka source starting from earliest is
    refused by the API server."""
    allow_reread: bool = False
    """true: start over even when the new query reads again what the old one already wrote
    (those rows are written a second time: duplicates the user accepts)."""


class Lifecycle(Model):
    """Declared checkpoint actions: snapshots and starting over (docs/runbook.md, Lifecycle)."""

    snapshot: SnapshotRequest | None = None
    """A snapshot of the checkpoint and the decision log's position, taken at a restart."""
    start_over: StartOver | None = None
    """Start over with a new query (the old checkpoint is kept as a snapshot)."""
    snapshot_on_spec_change: bool = False
    """true: the driver also takes a snapshot, snapshot-auto-<digest>, whenever it starts with a
    spec (the fields it reads, lifecycle left out) or a job image it has not taken one for: the
    checkpoint as the previous spec left it, before the new one runs a batch. A spec reverted
    to one already snapshotted takes none."""
    retention: Annotated[int, Field(ge=1, le=50)] = 3
    """Snapshot folders kept (start-over and automatic ones included): the newest; older ones
    are deleted when the driver starts (their records stay, so their nonces stay used)."""


class PipelineSpec(Model):
    """Desired state of an ExactlyOncePipeline."""

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "!has(self.restartPolicy) || !has(self.restartPolicy.progressTimeoutSeconds)"
                " || self.restartPolicy.progressTimeoutSeconds == 0"
                " || self.restartPolicy.progressTimeoutSeconds >= "
                "(has(self.alerts) && has(self.alerts.maxCheckpointDurationSeconds)"
                " ? self.alerts.maxCheckpointDurationSeconds : 300)"
                " + (has(self.checkpoint.triggerIntervalSeconds)"
                " ? self.checkpoint.triggerIntervalSeconds : 10) + 30",
                "restartPolicy.progressTimeoutSeconds must be 0 (off) or at least "
                "alerts.maxCheckpointDurationSeconds + checkpoint.triggerIntervalSeconds + 30: no "
                "heartbeat comes while a batch runs, so a smaller bound restarts healthy drivers",
                ".restartPolicy.progressTimeoutSeconds",
            ),
            (
                "self.sinks.all(s, self.sinks.exists_one(t, t.name == s.name))",
                "sink names must be unique",
                ".sinks",
            ),
            (
                "self.guarantee != 'idempotent'"
                " || self.sinks.all(s, " + SINK_MODE + " == 'upsert')",
                "guarantee idempotent needs mode upsert on every sink",
                ".sinks",
            ),
            (
                "self.guarantee == 'exactly-once'"
                " || self.sinks.all(s, !has(s.postgres) || s.postgres.mode != 'accumulate')",
                "mode accumulate needs guarantee exactly-once: under another guarantee a "
                "replayed batch would add its sums twice",
                ".sinks",
            ),
            (
                "self.guarantee == 'exactly-once'"
                " || self.sinks.all(s, !has(s.postgres) || !has(s.postgres.sumColumns)"
                " || size(s.postgres.sumColumns) == 0)",
                "sumColumns needs guarantee exactly-once: sums are stored with the batch's "
                "decision, which only exactly-once makes the rows' commit point",
                ".sinks",
            ),
            (
                "!has(self.audit) || !has(self.audit.appendOnly)"
                " || self.audit.appendOnly.all(n, self.sinks.exists(s, s.name == n))",
                "audit.appendOnly may name only sinks of this pipeline",
                ".audit.appendOnly",
            ),
            (
                "!has(self.audit) || !has(self.audit.appendOnly)"
                " || self.audit.appendOnly.all(n, self.sinks.all(s, s.name != n"
                " || " + SINK_MODE + " == 'append'))",
                "audit.appendOnly may name only sinks of mode append: an upsert or accumulate "
                "table's row count moves by new keys only",
                ".audit.appendOnly",
            ),
            (
                "has(self.control) == has(oldSelf.control)"
                " && (!has(self.control) || self.control == oldSelf.control)",
                "spec.control is immutable: its database holds the decision log; moving it "
                "would forget every decided batch (run `eo recover`, then re-create the pipeline)",
                ".control",
            ),
            (
                "has(self.control) || (self.sinks[0].name == oldSelf.sinks[0].name"
                " && has(self.sinks[0].postgres) == has(oldSelf.sinks[0].postgres)"
                " && (has(self.sinks[0].postgres)"
                " ? self.sinks[0].postgres.dsn == oldSelf.sinks[0].postgres.dsn"
                " : self.sinks[0].mysql.dsn == oldSelf.sinks[0].mysql.dsn))",
                "without spec.control the first sink's database holds the decision log: keep "
                "spec.sinks[0] first, with the same name and dsn",
                ".sinks",
            ),
            (
                "!has(self.lifecycle) || !has(self.lifecycle.startOver)"
                " || !has(self.source.kafka)"
                " || (has(self.source.kafka.startingOffsets)"
                " && self.source.kafka.startingOffsets == 'latest')"
                " || (has(self.lifecycle.startOver.allowReread)"
                " && self.lifecycle.startOver.allowReread)",
                "lifecycle.startOver with a kafka source starting from earliest reads again every "
                "record the topics still hold, and writes again what the old query wrote: set "
                "source.kafka.startingOffsets: latest, or lifecycle.startOver.allowReread: true",
                ".lifecycle.startOver",
            ),
            *(
                (
                    rule,
                    "sparkConf may not set keys eo manages (spark.master, spark.kubernetes.*, "
                    "spark.hadoop.*, sizes, ports, time zone, ...) nor credentials (they come "
                    "from Secrets): `eo validate` names the key",
                    ".sparkConf",
                )
                for rule in conf.cel_rules("sparkConf")
            ),
            *(
                (
                    rule,
                    "hadoopConf may not set the checkpoint store's endpoint or credentials "
                    "provider (use spec.checkpoint.s3) nor credentials (they come from Secrets)",
                    ".hadoopConf",
                )
                for rule in conf.cel_rules("hadoopConf")
            ),
        )
    )

    guarantee: Annotated[Guarantee, Strict(False)] = Guarantee.EXACTLY_ONCE
    """exactly-once (fenced two-phase commit), idempotent (upsert by key) or at-least-once."""
    source: Source
    """Where records come from."""
    transform: Transform | None = None
    """Optional SQL over the view ``source``."""
    sinks: Annotated[list[SinkSpec], Field(min_length=1, max_length=8)]
    """Outputs; one decision per batch covers all of them."""
    control: ControlDatabase | None = None
    """Where the fence and the decision log live (default: the first sink's database)."""
    dead_letter: DeadLetter = Field(default_factory=DeadLetter)
    """Where poison records go."""
    checkpoint: Checkpoint
    """Spark checkpoint location and trigger."""
    driver: Driver = Field(default_factory=Driver)
    """Driver pod settings."""
    executors: Executors = Field(default_factory=Executors)
    """Executor settings."""
    restart_policy: RestartPolicy = Field(default_factory=RestartPolicy)
    """Relaunch behaviour after failures."""
    alerts: Alerts = Field(default_factory=Alerts)
    """Alert thresholds."""
    audit: Audit = Field(default_factory=Audit)
    """The operator's continuous audit (interval, cost bound, what it may assume per sink)."""
    suspend: bool = False
    """true stops the driver at a batch boundary and resolves in-doubt transactions."""
    lifecycle: Lifecycle | None = None
    """Snapshots of the checkpoint and starting over, each asked for by a new nonce."""
    restart_nonce: Annotated[int, Field(ge=0)] = 0
    """Change it (e.g. increment) to restart the driver on purpose: stopped at a batch
    boundary and relaunched with a new epoch, like any spec change; not counted as a failure."""
    spark_conf: Annotated[dict[str, str], Field(max_length=conf.MAX_ENTRIES)] = Field(
        default_factory=dict
    )
    """Spark settings for the driver and executors (e.g. spark.sql.shuffle.partitions,
    spark.ui.enabled). Keys eo manages are refused, and so are credentials."""
    hadoop_conf: Annotated[dict[str, str], Field(max_length=conf.MAX_ENTRIES)] = Field(
        default_factory=dict
    )
    """Hadoop settings (without the spark.hadoop. prefix), e.g. for a checkpoint file system.
    The checkpoint store's endpoint and credentials belong in spec.checkpoint.s3."""

    @model_validator(mode="after")
    def _conf_keys_allowed(self) -> PipelineSpec:
        for field, values in (("sparkConf", self.spark_conf), ("hadoopConf", self.hadoop_conf)):
            refused = conf.refusals(field, values)
            if refused:
                path, reason = refused[0]
                raise FieldError(path, reason)
        return self

    @model_validator(mode="after")
    def _audit_names_sinks(self) -> PipelineSpec:
        sinks = {s.name: s for s in self.sinks}
        for i, name in enumerate(self.audit.append_only):
            if name not in sinks:
                raise FieldError(
                    f"audit.appendOnly[{i}]",
                    f"{name!r} is not a sink of this pipeline (sinks: {', '.join(sinks)})",
                )
            if sinks[name].target.mode != "append":
                raise FieldError(
                    f"audit.appendOnly[{i}]",
                    f"sink {name} is mode {sinks[name].target.mode}, so its row count moves "
                    "by new keys only; remove it from audit.appendOnly",
                )
        for name in self.audit.batch_columns:
            if name not in self.audit.append_only:
                raise FieldError(
                    f"audit.batchColumns.{name}",
                    f"list {name!r} in audit.appendOnly too (rows per "
                    "batch are counted only in a table eo alone appends to)",
                )
        return self

    @model_validator(mode="after")
    def _start_over_reads_nothing_twice(self) -> PipelineSpec:
        start = None if self.lifecycle is None else self.lifecycle.start_over
        kafka = self.source.kafka
        if (
            start is not None
            and kafka is not None
            and kafka.starting_offsets == "earliest"
            and not start.allow_reread
        ):
            raise FieldError(
                "lifecycle.startOver",
                "a start-over with a kafka source starting from earliest reads again every "
                "record the topics still hold, and writes again what the old query wrote: set "
                "source.kafka.startingOffsets: latest, or lifecycle.startOver.allowReread: true",
            )
        return self

    @model_validator(mode="after")
    def _progress_timeout_above_a_batch(self) -> PipelineSpec:
        timeout = self.restart_policy.progress_timeout_seconds
        least = (
            self.alerts.max_checkpoint_duration_seconds
            + self.checkpoint.trigger_interval_seconds
            + PROGRESS_MARGIN_SECONDS
        )
        if timeout and timeout < least:
            raise FieldError(
                "restartPolicy.progressTimeoutSeconds",
                f"progressTimeoutSeconds {timeout} is below alerts.maxCheckpointDurationSeconds "
                f"({self.alerts.max_checkpoint_duration_seconds}) + checkpoint."
                f"triggerIntervalSeconds ({self.checkpoint.trigger_interval_seconds}) + "
                f"{PROGRESS_MARGIN_SECONDS}: no heartbeat comes while a batch runs, so a batch "
                f"that slow would be restarted as hung; set it to at least {least}, or 0 (off)",
            )
        return self

    @model_validator(mode="after")
    def _sinks_sane(self) -> PipelineSpec:
        names = [s.name for s in self.sinks]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise FieldError("sinks", f"sink names must be unique; repeated: {', '.join(dupes)}")
        if self.guarantee == Guarantee.IDEMPOTENT:
            for i, sink in enumerate(self.sinks):
                if sink.target.mode != "upsert":
                    raise FieldError(
                        f"sinks[{i}].{sink.kind}.mode",
                        "guarantee idempotent needs mode upsert with keyColumns on every sink",
                    )
        if self.guarantee != Guarantee.EXACTLY_ONCE:
            for i, sink in enumerate(self.sinks):
                if sink.target.mode == "accumulate":
                    raise FieldError(
                        f"sinks[{i}].postgres.mode",
                        f"mode accumulate needs guarantee exactly-once: under {self.guarantee} "
                        "a replayed batch would add its sums twice; set guarantee: exactly-once "
                        "or use mode upsert",
                    )
                if sink.target.sum_columns:
                    raise FieldError(
                        f"sinks[{i}].postgres.sumColumns",
                        f"sumColumns needs guarantee exactly-once: under {self.guarantee} the "
                        "rows commit before the batch is logged, so no stored sum can be "
                        "checked against them; remove sumColumns or set guarantee: exactly-once",
                    )
        return self

    def warnings(self) -> list[str]:
        """Valid but risky choices a person should hear about (``eo validate`` prints them)."""
        return [
            f"spec.sinks[{i}].{sink.kind}.versionColumn: not set, so when one batch holds several "
            "rows of a key, which one wins is undefined (Spark's shuffle does not keep source "
            "order); set versionColumn to a column that orders the updates of a key"
            for i, sink in enumerate(self.sinks)
            if sink.target.mode == "upsert" and sink.target.version_column is None
        ]

    def dead_letter_table(self) -> str:
        """The dead-letter table: explicit, or the first sink's table + ``_dead_letter``."""
        return self.dead_letter.table or f"{self.sinks[0].target.table}_dead_letter"

    def dead_letter_table_in(self, kind: Literal["postgres", "mysql"]) -> str:
        """The dead-letter table's name in a database of ``kind`` (a sink's ``kind``).

        Each database that holds dead letters has its own table of this name: a MySQL one in
        the DSN's database (the name's last part: a MySQL sink writes them inside its own XA
        branch); a PostgreSQL one as named, or, when the name is the default derived from a
        MySQL first sink (``database.table``), in schema ``public``.
        """
        name = self.dead_letter_table()
        last = name.rpartition(".")[2]
        if kind == "mysql":
            return last
        if self.dead_letter.table is None and self.sinks[0].kind == "mysql":
            return f"public.{last}"
        return name


class Condition(Model):
    """A Kubernetes-style condition."""

    type: str
    """Ready, Progressing, Stalled, SinkContract, SpecValid, Audited, RolledBack or Lifecycle."""
    status: Literal["True", "False", "Unknown"]
    """Condition status."""
    reason: str = ""
    """CamelCase reason."""
    message: str = ""
    """Human-readable detail."""
    last_transition_time: str | None = None
    """RFC 3339 time of the last status change."""


class LastFailure(Model):
    """The last driver failure, as the operator observed it on the pod."""

    pod: str
    """The driver pod that failed (kept for its logs while within restartPolicy.keepFailedPods)."""
    reason: str
    """The container's terminated reason (Error, OOMKilled, ...) or, for a driver that never
    started, its waiting reason (ImagePullBackOff, CreateContainerConfigError, Unschedulable)."""
    exit_code: int | None = None
    """Exit code of the driver container; none when it never started."""
    message: str = ""
    """The last line of the container's termination message (the tail of its log), or the
    waiting message of a driver that never started."""
    time: str | None = None
    """When the operator recorded the failure (RFC 3339)."""


class Rollout(Model):
    """The spec being rolled out (``status.rollout``): its first launch starts the clock of
    ``restartPolicy.rollbackAfterSeconds``."""

    spec_hash: str
    """The spec hash of the new spec."""
    generation: int | None = None
    """The metadata.generation it was first launched from."""
    since: str
    """When a driver of that spec hash was first launched (RFC 3339)."""


class RolledBack(Model):
    """An automatic rollback in force (``status.rolledBack``), until the spec is edited."""

    from_generation: int
    """The generation that did not run stable in time, and is not retried until an edit."""
    from_spec_hash: str
    """Its spec hash."""
    to_generation: int | None = None
    """The generation of the last stable spec that runs instead."""
    to_spec_hash: str
    """Its spec hash (``status.lastStable.specHash``)."""
    time: str
    """When the operator rolled back (RFC 3339)."""


class StableSpec(Model):
    """The last spec that ran stable (``status.lastStable``).

    Stable means: a driver launched with this spec reached Running and a batch was decided
    (committed) in the decision log with that driver's own epoch, i.e. after it was launched
    and by it, not by a driver before it (each epoch is handed to one driver only). A new spec
    whose driver fails, never starts, or decides nothing leaves this at the previous one."""

    spec_hash: str
    """The spec hash that driver carried (what ``driverSpecHash`` showed while it ran)."""
    generation: int | None = None
    """The metadata.generation it was launched with (``driverGeneration``); none for a driver
    launched by an operator older than that field."""
    since: str
    """When the operator first saw a driver of this spec hash and generation stable (RFC 3339)."""


class Transition(Model):
    """One change of phase or reason (``status.history``)."""

    time: str
    """When the operator recorded it (RFC 3339)."""
    phase: str
    """The phase entered."""
    reason: str = ""
    """The reason entered (CamelCase, as ``status.reason``)."""
    message: str = ""
    """The status message at that moment, cut to 200 characters."""
    epoch: int | None = None
    """The epoch of the driver it concerns: the one being launched, else ``status.epoch``."""


class AuditPosition(Model):
    """Where the next audit pass starts (``eo_jobs.audit.Position``)."""

    batches: dict[str, int] = Field(default_factory=dict)
    """Streaming query (gid token) -> last audited batch."""
    table_rows: dict[str, int] = Field(default_factory=dict)
    """Sink -> table rows the audited batches account for (the count check's baseline)."""
    table_sums: dict[str, dict[str, str]] = Field(default_factory=dict)
    """Sink -> sum column -> the table's sum (decimal text) the audited batches account for
    (the sum check's baseline, ``sinks[].postgres.sumColumns``)."""


class AuditViolation(Model):
    """The first violation the audit found, kept until acknowledged (annotation
    ``eo.dev/audit-acknowledged`` set to a time after ``detectedAt``)."""

    check: str
    """The check that failed (docs/audit.md)."""
    batch: int | None = None
    """The batch it concerns."""
    query: str | None = None
    """The streaming query id."""
    evidence: str = ""
    """What the audit saw."""
    detected_at: str
    """When the pass that found it ran (RFC 3339)."""


class AuditStatus(Model):
    """What the operator's continuous audit has checked so far."""

    position: AuditPosition | None = None
    """Where the next pass starts."""
    last_audited_batch: int | None = None
    """Highest batch every check is final for."""
    last_pass_time: str | None = None
    """When the last pass ran (RFC 3339)."""
    batches_audited: int = 0
    """Decided batches audited since the audit was switched on."""
    batches_last_pass: int = 0
    """Decided batches the last pass looked at."""
    lag_batches: int | None = None
    """Decided batches beyond the position (the audit lag)."""
    checks_run: list[str] = Field(default_factory=list)
    """Checks the last pass fully ran."""
    not_run: list[str] = Field(default_factory=list)
    """Checks the last pass could not run, or ran in part, each with the reason."""
    violation: AuditViolation | None = None
    """The first violation found and not yet acknowledged."""


class SnapshotRecord(Model):
    """A snapshot kept (``status.lifecycle.snapshots``), as the control database records it."""

    name: str
    """Its folder under <checkpoint.location>/eo-snapshots: snapshot-<nonce>, or
    start-over-<nonce> for the checkpoint a start-over set aside."""
    kind: Literal["snapshot", "start-over"]
    """What took it."""
    nonce: str
    """The nonce that asked for it."""
    taken_at: str
    """When the driver took it (RFC 3339)."""
    epoch: int
    """The epoch of the driver that took it (the fence was at this epoch, nothing in doubt)."""
    query_id: str | None = None
    """The streaming query of the checkpoint copied (none for an empty checkpoint)."""
    last_decided_batch: int | None = None
    """The decision log's last batch of that query when it was taken."""
    last_decided_epoch: int | None = None
    """The epoch that batch was decided with."""
    last_committed_batch: int | None = None
    """The last batch in the copied checkpoint's commit log (Spark's)."""


class StartOverRecord(Model):
    """The last start-over done (``status.lifecycle.startOver``)."""

    nonce: str
    """The nonce of spec.lifecycle.startOver it answered."""
    time: str
    """When the driver did it (RFC 3339)."""
    epoch: int
    """The epoch of the driver that did it."""
    forgotten_queries: list[str] = Field(default_factory=list)
    """The streaming queries whose decisions it deleted."""
    forgotten_decisions: int = 0
    """Decisions deleted."""
    snapshot: str | None = None
    """The snapshot holding the checkpoint it set aside (none when the checkpoint was empty)."""


class LifecycleStatus(Model):
    """What the lifecycle actions (spec.lifecycle) did, from the control database."""

    snapshots: list[SnapshotRecord] = Field(default_factory=list)
    """Snapshots kept, oldest first (at most spec.lifecycle.retention)."""
    start_over: StartOverRecord | None = None
    """The last start-over."""


class PipelineStatus(Model):
    """Observed state, written by the operator only."""

    phase: str = "Pending"
    """Pending, Starting, Running, Recovering, Backoff, Suspended, Stopping, Failed, or Waiting
    (another writer owns the sink fence: waiting for a hand-over, see the FenceOwned condition)."""
    guarantee: str | None = None
    """The consistency level in force."""
    epoch: int | None = None
    """Fencing epoch of the current driver."""
    recovered_epoch: int | None = None
    """Epoch of the last recovery that finished (fence raised, in-doubt transactions resolved)."""
    driver_pod: str | None = None
    """Name of the current driver pod."""
    driver_spec_hash: str | None = None
    """The spec hash the current driver pod carries (its eo.dev/spec-hash label): a hash of the
    spec fields the driver reads, defaults left out, and of its image (a driver launched by an
    operator older than this field carries the older formula's hash). The operator restarts a
    driver whose hash is out of date; an edit of suspend, alerts or restartPolicy, which only
    the operator reads, restarts none."""
    driver_generation: int | None = None
    """The metadata.generation of the spec the current driver pod was launched with (its
    eo.dev/generation annotation; none for a driver launched by an operator older than this
    field). ``observedGeneration`` moves on with every edit; this one only when a driver is
    launched, so an edit the driver does not read (suspend, alerts, restartPolicy: no restart)
    leaves it behind."""
    last_stable: StableSpec | None = None
    """The spec hash and generation of the last driver that was stable: reached Running and then
    decided (committed) a batch with its own epoch, so after its launch. Recorded when that is
    first seen; never cleared: a new spec that fails, never starts or decides nothing leaves
    the previous stable one here, which is what to go back to."""
    rollout: Rollout | None = None
    """The spec hash last launched that was not yet stable when launched, and since when: the
    clock of restartPolicy.rollbackAfterSeconds."""
    rolled_back: RolledBack | None = None
    """An automatic rollback in force (restartPolicy.rollbackAfterSeconds): the generation it
    rolled back from and the last stable one that runs instead; removed by the next edit."""
    history: list[Transition] = Field(default_factory=list)
    """The last 10 changes of phase or reason, oldest first (a pass that changes neither adds
    nothing): how the pipeline got where it is."""
    restarts: int = 0
    """Driver relaunches after failures inside the restart window."""
    last_batch_id: int | None = None
    """Last decided micro-batch."""
    last_commit_time: str | None = None
    """When the last batch was decided (RFC 3339)."""
    checkpoint_duration_seconds: float | None = None
    """Duration of the last batch: prepare + decide + commit."""
    commit_duration_seconds: float | None = None
    """Duration of phase 2 (COMMIT PREPARED) of the last batch."""
    failure_rate_percent: float | None = None
    """Failed batch attempts over all attempts in the last 15 minutes."""
    in_doubt_transactions: int = 0
    """Prepared transactions of this pipeline not yet committed or rolled back."""
    oldest_in_doubt_seconds: float | None = None
    """Age of the oldest in-doubt transaction."""
    message: str | None = None
    """Short human-readable summary of the last event."""
    reason: str | None = None
    """CamelCase reason of the current phase (e.g. DriverFailed, CrashLoop, InvalidSpec)."""
    last_launch_time: str | None = None
    """When the current driver was launched."""
    last_failure_time: str | None = None
    """When the driver last failed."""
    last_failure: LastFailure | None = None
    """What the last failed driver reported: pod, reason, exit code, last error line."""
    backoff_until: str | None = None
    """The next launch is not before this time."""
    failed_generation: int | None = None
    """Generation that failed permanently; any spec change retries."""
    observed_generation: int | None = None
    """metadata.generation of the spec this status reflects."""
    audit: AuditStatus | None = None
    """The continuous audit's position and last result (spec.audit)."""
    lifecycle: LifecycleStatus | None = None
    """Snapshots kept and the last start-over (spec.lifecycle)."""
    conditions: list[Condition] = Field(default_factory=list)
    """Ready, Progressing, Stalled, SinkContract, SpecValid, Audited, RolledBack, Lifecycle."""


class ObjectMeta(BaseModel):
    """The subset of Kubernetes metadata eo reads."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    name: Annotated[
        str, StringConstraints(min_length=1, max_length=NAME_MAX_LENGTH, pattern=NAME_PATTERN)
    ]
    """The operator labels the pipeline's objects with it, and a label value holds 63 characters
    (the CRD has the same rule, see ``crd.metadata_rules``)."""
    namespace: Annotated[str, StringConstraints(max_length=63, pattern=NAMESPACE_PATTERN)] = (
        "default"
    )
    annotations: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)


class Pipeline(Model):
    """A whole ExactlyOncePipeline object."""

    api_version: Literal["eo.dev/v1alpha1"] = Field("eo.dev/v1alpha1", alias="apiVersion")
    kind: Literal["ExactlyOncePipeline"] = "ExactlyOncePipeline"
    metadata: ObjectMeta
    spec: PipelineSpec
    status: PipelineStatus | None = None

    @property
    def key(self) -> str:
        """Cluster-unique identity of the pipeline: ``namespace/name``."""
        return f"{self.metadata.namespace}/{self.metadata.name}"

    def epoch_annotation(self) -> int | None:
        """The epoch recorded on the object, if any."""
        raw = self.metadata.annotations.get(EPOCH_ANNOTATION)
        return int(raw) if raw is not None and raw.isdigit() else None


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """JSON schema of a model with wire (camelCase) names."""
    return model.model_json_schema(by_alias=True, mode="validation")
