"""``eo run``: the program inside the driver pod.

Order of work: read the spec, wait (with backoff, saying why) until every sink answers, check
the sink contract, fence and recover with this driver's epoch, and only then start the
streaming query. A driver started by hand after a crash is therefore as safe as one started by
the operator. Exit codes are documented in ``eo --help``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from eo_jobs import logs
from eo_jobs.protocol.control import FENCE_OWNER_ENV
from eo_jobs.protocol.coordinator import BatchResult, Coordinator
from eo_jobs.protocol.errors import (
    EXIT_CHECKPOINT_RESET,
    EXIT_FENCED,
    EXIT_LIFECYCLE_REFUSED,
    EXIT_SINK_CONTRACT,
    CheckpointMismatchError,
    CheckpointResetError,
    FencedError,
    FenceRegressionError,
    LifecycleRefusedError,
)
from eo_jobs.protocol.registry import ControlMovedError
from eo_jobs.runtime import checkpoint_fence, lifecycle
from eo_jobs.runtime.batch import BatchContext, ForeachBatch
from eo_jobs.runtime.batch_sums import sum_column_problems
from eo_jobs.runtime.checkpoint import CheckpointLog
from eo_jobs.runtime.checkpoint_store import store_for
from eo_jobs.runtime.commit_log import spark_committed
from eo_jobs.runtime.failed_attempts import FailedAttempts
from eo_jobs.runtime.jvm_writer import jvm_ready
from eo_jobs.runtime.metrics import DriverMetrics
from eo_jobs.runtime.phase_two import PhaseTwoError
from eo_jobs.runtime.stragglers import IdleReaper
from eo_jobs.sinks.kinds import kind_of
from eo_jobs.sinks.postgres.binding import Bound, bind, sink_dsns
from eo_jobs.sinks.table_writer import TableWriter
from eo_jobs.spec import Pipeline, kafka, load_pipeline, parse_pipeline
from eo_jobs.spec.models import DEAD_LETTER_SINK, Guarantee, SinkSpec

log = logging.getLogger("eo.run")

SPEC_ENV = "EO_PIPELINE_SPEC"
SINK_WAIT_ENV = "EO_SINK_WAIT_SECONDS"
IMAGE_ENV = "EO_JOB_IMAGE"
"""The job image the operator launched the driver with (an automatic snapshot's digest)."""


class StartupError(RuntimeError):
    """The driver cannot start; ``code`` is its exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def load(args: argparse.Namespace) -> Pipeline:
    """The pipeline from the file argument or from ``$EO_PIPELINE_SPEC`` (set by the operator)."""
    if args.file:
        return load_pipeline(Path(args.file))
    text = os.environ.get(SPEC_ENV)
    if not text:
        raise StartupError(f"no pipeline: pass PIPELINE.yaml or set {SPEC_ENV}", 2)
    return parse_pipeline(yaml.safe_load(text), SPEC_ENV)


def wait_for_sinks(dsns: dict[str, str], budget: float) -> None:
    """Block until every sink accepts a connection, with capped exponential backoff."""
    deadline = time.monotonic() + budget
    delay = 1.0
    for name, dsn in dsns.items():
        while True:
            try:
                kind_of(dsn).ping(dsn)
                break
            except ConnectionError as exc:
                reason = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                if time.monotonic() + delay > deadline:
                    raise StartupError(
                        f"sink {name} unreachable for {budget:.0f}s: {reason}"
                    ) from None
                log.warning("sink %s unreachable (%s); retrying in %.0fs", name, reason, delay)
                time.sleep(delay)
                delay = min(delay * 2, 30.0)


Schema = list[tuple[str, str]]
"""(name, Spark type) of each column of a frame."""


def _planned(spark: Any, over: Any, sql: str | None, field: str) -> Any:
    """``sql`` over the view ``source`` of the empty frame ``over``, planned (not run)."""
    if sql is None:
        return over
    over.createOrReplaceTempView("source")
    try:
        return spark.sql(sql)
    except Exception as exc:
        raise StartupError(f"{field} does not compile: {exc}") from exc


def _schema(frame: Any) -> Schema:
    return [(f.name, f.dataType.simpleString()) for f in frame.schema.fields]


def output_schemas(spark: Any, pipeline: Pipeline) -> dict[str, Schema]:
    """Each sink's columns, found by planning the queries over an empty input: the pipeline's
    transform output, or what the sink's own query (``sinks[].transform``) makes of it."""
    from pyspark.sql.types import StructType

    spec = pipeline.spec
    source = spec.source
    ddl = source.files.schema_ if source.files else source.kafka.schema_  # type: ignore[union-attr]
    empty = spark.createDataFrame([], StructType.fromDDL(ddl))
    sql = spec.transform.sql if spec.transform else None
    out = _planned(spark, empty, sql, "spec.transform.sql")
    return {
        s.name: _schema(
            _planned(
                spark,
                out,
                s.transform.sql if s.transform else None,
                f"spec.sinks[{i}].transform.sql",
            )
        )
        for i, s in enumerate(spec.sinks)
    }


def written_schema(sink: SinkSpec, schema: Schema) -> Schema:
    """The columns eo writes into the sink: the rows' own, then the ``auditColumn`` it fills
    with the batch id (a Spark literal added to the sink's rows, so both writers write it as
    they write any bigint column)."""
    column = sink.target.audit_column
    return schema if column is None else [*schema, (column, "bigint")]


def _audit_column_problems(index: int, sink: SinkSpec, columns: list[str]) -> list[str]:
    """eo fills the audit column itself: the rows may not bring a column of that name."""
    column = sink.target.audit_column
    if column is None or column not in columns:
        return []
    where = f"spec.sinks[{index}].transform.sql" if sink.transform else "spec.transform.sql"
    return [
        f"[audit-column] the sink's rows already have a column {column}, and eo fills "
        f"auditColumn with the batch id itself: drop or rename {column} in {where} (or in the "
        f"source schema), or choose another spec.sinks[{index}].postgres.auditColumn"
    ]


def writers_for(
    pipeline: Pipeline, dsns: dict[str, str], schemas: dict[str, Schema]
) -> dict[str, TableWriter]:
    """One picklable writer per sink (of its database's kind), of the columns eo writes."""
    return {
        s.name: kind_of(dsns[s.name]).writer(
            s.target,
            dsns[s.name],
            tuple(name for name, _ in written_schema(s, schemas[s.name])),
        )
        for s in pipeline.spec.sinks
    }


def _kind_problems(index: int, sink: SinkSpec, dsn: str) -> list[str]:
    """A sink's spec field must match its DSN's database kind (``mysql`` needs mysql://)."""
    kind = kind_of(dsn).name
    expected = "mysql" if sink.kind == "mysql" else "postgresql"
    if kind == expected:
        return []
    return [
        f"[database-kind] spec.sinks[{index}].{sink.kind} names a {expected} table, but its "
        f"dsn is a {kind} connection string; use a "
        + ("mysql://user:password@host:3306/database" if expected == "mysql" else "postgresql://")
        + f" DSN, or declare the sink as {'mysql' if kind == 'mysql' else 'postgres'}"
    ]


def _accumulate_problems(index: int, sink: SinkSpec, columns: list[str]) -> list[str]:
    """An accumulate sink's rows must hold its key and add columns, and nothing else."""
    target = sink.target
    if target.mode != "accumulate":
        return []
    named = [*target.key_columns, *target.add_columns]
    missing = [c for c in named if c not in columns]
    extra = [c for c in columns if c not in named]
    where = (
        f"spec.sinks[{index}].transform.sql"
        if sink.transform
        else f"spec.transform.sql, or give the sink its own spec.sinks[{index}].transform.sql"
    )
    return [
        f"[accumulate-columns] mode accumulate writes keyColumns and addColumns only: {what} "
        f"{', '.join(names)}; change {where}"
        for what, names in (("missing", missing), ("also has", extra))
        if names
    ]


def check_sinks(pipeline: Pipeline, dsns: dict[str, str], schemas: dict[str, Schema]) -> None:
    """Refuse to start against a sink that cannot honour the guarantee, whose columns cannot
    hold the output's Spark types, or a dead-letter table the driver's role can neither write
    nor create (it is written by the first sink's role, and by the role of each sink with its
    own query, whose rows it cannot store go to that table in its own database)."""
    two_phase = pipeline.spec.guarantee == Guarantee.EXACTLY_ONCE
    problems: list[str] = []
    for index, sink in enumerate(pipeline.spec.sinks):
        schema = schemas[sink.name]
        columns = [name for name, _ in schema]
        dsn = dsns[sink.name]
        found = _kind_problems(index, sink, dsn)
        if not found:
            found = [
                *_accumulate_problems(index, sink, columns),
                *_audit_column_problems(index, sink, columns),
                *sum_column_problems(sink, schema),
                *kind_of(dsn).contract_problems(
                    sink.target,
                    dsn,
                    written_schema(sink, schema),
                    two_phase=two_phase,
                    dead_letter_table=(
                        pipeline.spec.dead_letter_table_in(sink.kind)
                        if index == 0 or sink.transform is not None
                        else None
                    ),
                ),
            ]
        problems.extend(f"sink {sink.name}: {problem}" for problem in found)
    if problems:
        raise StartupError(
            f"refusing to start in {pipeline.spec.guarantee} mode:\n  " + "\n  ".join(problems),
            EXIT_SINK_CONTRACT,
        )


def start_protocol(
    pipeline: Pipeline,
    epoch: int,
    dsns: dict[str, str],
    committed: tuple[str, int] | None = None,
) -> tuple[Bound, Coordinator]:
    """Bind and claim the databases, check that the decision log holds the latest batch Spark
    committed (``committed``: its query id and batch; ``Coordinator.check_checkpoint``),
    then fence and recover with this driver's epoch."""
    bound = bind(pipeline, dsns)
    try:
        bound.claim()
    except ControlMovedError as exc:
        raise StartupError(str(exc), EXIT_SINK_CONTRACT) from exc
    first = pipeline.spec.sinks[0].name
    stores = {**bound.stores, DEAD_LETTER_SINK: bound.stores[first]}
    owner = os.environ.get(FENCE_OWNER_ENV) or None  # set by the operator's pod template
    coordinator = Coordinator(pipeline.key, epoch, bound.control, stores, owner)
    if committed is not None:
        coordinator.check_checkpoint(*committed)
    try:
        report = coordinator.startup()
    except FenceRegressionError as exc:
        raise StartupError(f"fenced: {exc}", EXIT_FENCED) from exc
    # The report names the pipeline by its key ("namespace/name"); the event's pipeline and
    # namespace fields are those of every log record, from the context.
    recovered = {k: v for k, v in report.as_json().items() if k != "pipeline"}
    logs.event("recovered", **recovered)
    return bound, coordinator


def run_lifecycle(
    pipeline: Pipeline, epoch: int, bound: Bound, spark: Any, checkpoint: CheckpointLog
) -> CheckpointLog:
    """``spec.lifecycle``'s actions not done yet (``runtime.lifecycle``), now that the fence is
    at this driver's epoch and nothing is in doubt; a refused start-over exits 79. Returns the
    checkpoint to run with: read again after the actions (a start-over's is a new query's)."""
    location = pipeline.spec.checkpoint.location
    if pipeline.spec.lifecycle is None:
        return checkpoint
    folder = lifecycle.Checkpoint(
        location, store_for(location, spark), lambda path: store_for(path, spark)
    )
    try:
        lifecycle.run(pipeline, epoch, bound.control, folder, os.environ.get(IMAGE_ENV, ""))
    except LifecycleRefusedError as exc:
        bound.close()
        raise StartupError(str(exc), EXIT_LIFECYCLE_REFUSED) from exc
    return CheckpointLog.of(location, spark)


class Progress:
    """Per-batch log line and metrics (fed from foreachBatch, which knows the timings)."""

    def __init__(self, metrics: DriverMetrics) -> None:
        self.metrics = metrics
        self.failure: BaseException | None = None

    def batch(self, result: BatchResult, seconds: float) -> None:
        """Log and count one decided batch."""
        self.metrics.batch(
            result.batch_id, seconds, result.commit_ms / 1000.0, dict(result.rows_by_sink)
        )
        logs.event(
            "batch",
            batch=result.batch_id,
            rows=result.rows,
            prepare_ms=round(result.prepare_ms, 1),
            decide_ms=round(result.decide_ms, 1),
            commit_ms=round(result.commit_ms, 1),
            seconds=round(seconds, 3),
            rows_by_sink=dict(result.rows_by_sink),
        )

    def failed(self, exc: BaseException) -> None:
        """Remember why a batch failed (Spark wraps it; the exit code needs the type)."""
        self.failure = exc
        if isinstance(exc, FencedError):
            self.metrics.fenced()
        else:
            self.metrics.failed()


def _install_stop(query: Any, ctx: BatchContext, requested: threading.Event) -> None:
    """Stop at the next batch boundary once ``requested`` is set, so no batch is cut in half
    needlessly: by SIGTERM, or by a phase 2 that gave up (``PhaseTwo.on_give_up``; on an idle
    stream no next batch would ever raise its failure, so the query is stopped and the driver
    exits non-zero for recovery to commit the batch)."""

    def stopper() -> None:
        requested.wait()
        while ctx.in_batch.is_set():
            time.sleep(0.05)
        log.warning("stop requested: stopping at a batch boundary")
        query.stop()

    threading.Thread(target=stopper, name="eo-stop", daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: requested.set())


def run(pipeline: Pipeline, epoch: int, available_now: bool, metrics_port: int | None) -> int:
    """Run the driver; returns the exit code."""
    from eo_jobs.runtime.listener import ProgressListener
    from eo_jobs.runtime.reread import Reread
    from eo_jobs.runtime.session import build_session
    from eo_jobs.runtime.source import read_source

    spec = pipeline.spec
    logs.set_context(
        pipeline=pipeline.metadata.name, namespace=pipeline.metadata.namespace, epoch=epoch
    )
    log.info(
        "driver starting: guarantee %s, %d sink(s), checkpoint %s",
        spec.guarantee.value,
        len(spec.sinks),
        spec.checkpoint.location,
    )
    dsns = sink_dsns(pipeline)
    source_secrets = (
        kafka.secret_options(spec.source.kafka, os.environ) if spec.source.kafka else {}
    )
    wait_for_sinks(dsns, float(os.environ.get(SINK_WAIT_ENV, "600")))
    spark = build_session(spec, f"eo-{pipeline.metadata.namespace}-{pipeline.metadata.name}")
    ui = spark.sparkContext.uiWebUrl
    if ui:
        log.info("Spark UI at %s (kubectl port-forward to the driver Service's port ui)", ui)
    schemas = output_schemas(spark, pipeline)
    check_sinks(pipeline, dsns, schemas)
    first_dsn = dsns[spec.sinks[0].name]
    for index, sink in enumerate(spec.sinks):
        if index == 0 or sink.transform is not None:
            kind_of(dsns[sink.name]).ensure_dead_letter_table(
                dsns[sink.name], spec.dead_letter_table_in(sink.kind)
            )

    checkpoint = CheckpointLog.of(spec.checkpoint.location, spark)
    bound, coordinator = start_protocol(pipeline, epoch, dsns, spark_committed(checkpoint, spark))
    unfenced = checkpoint_fence.arm(spark, spec.checkpoint.location, pipeline.key, epoch)
    if unfenced is not None:
        log.warning("the checkpoint's writes are not fenced by epoch: %s", unfenced)
    checkpoint = run_lifecycle(pipeline, epoch, bound, spark, checkpoint)

    metrics = DriverMetrics(pipeline.key)
    port = spec.driver.metrics_port if metrics_port is None else metrics_port
    if port:
        metrics.serve(port)
    metrics.set_epoch(epoch)
    progress = Progress(metrics)
    ctx = BatchContext(
        spec=spec,
        pipeline=pipeline.key,
        epoch=epoch,
        coordinator=coordinator,
        writers=writers_for(pipeline, dsns, schemas),
        dead_letters=kind_of(first_dsn).dead_letter_writer(
            first_dsn, spec.dead_letter_table_in(spec.sinks[0].kind)
        ),
        checkpoint=checkpoint,
        on_batch=progress.batch,
        on_failure=progress.failed,
        failed_attempts=(
            FailedAttempts(spark.sparkContext, dsns)
            if spec.guarantee == Guarantee.EXACTLY_ONCE
            else None
        ),
        reread=Reread.of(spark, spec, checkpoint, source_secrets),
        jvm_ready=jvm_ready(spark),
    )
    reaper = IdleReaper(coordinator, checkpoint.query_id) if ctx.failed_attempts else None
    listener = ProgressListener(metrics, on_idle=reaper.idle if reaper else None)
    spark.streams.addListener(listener)
    foreach = ForeachBatch(ctx)
    stop = threading.Event()
    foreach.phase_two.on_give_up = lambda _failure: stop.set()
    writer = (
        read_source(spark, spec, source_secrets)
        .writeStream.foreachBatch(foreach)
        .option("checkpointLocation", spec.checkpoint.location)
        .queryName(pipeline.metadata.name)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(
            processingTime=f"{spec.checkpoint.trigger_interval_seconds} seconds"
        )
    query = writer.start()
    _install_stop(query, ctx, stop)
    try:
        return _await(
            query,
            foreach,
            progress,
            functools.partial(checkpoint_fence.newer_epoch, spark, spec.checkpoint.location, epoch),
        )
    finally:
        _close(bound, ctx, spark, listener, reaper)


def _close(
    bound: Bound, ctx: BatchContext, spark: Any, listener: Any, reaper: IdleReaper | None
) -> None:
    """Close the driver's connections and stop Spark (the query has ended)."""
    bound.close()
    if ctx.failed_attempts is not None:
        ctx.failed_attempts.close()
    # Stop the JVM side first: its listener bus must not call back into a Python process
    # that is about to exit (that only produces py4j noise on stderr).
    with contextlib.suppress(Exception):
        spark.streams.removeListener(listener)
        spark.stop()
    if reaper is not None:
        reaper.close()


def _await(
    query: Any, foreach: ForeachBatch, progress: Progress, superseded: Callable[[], int | None]
) -> int:
    """Wait for the query to end, then for its last batch's phase 2; the exit code.

    ``superseded`` names a newer epoch recorded in the checkpoint, if any: a query that failed
    after this driver was replaced exits as fenced whatever Spark's own error was.
    """
    try:
        query.awaitTermination()
        foreach.drain()
    except PhaseTwoError as exc:  # the query ended; its last batch's phase 2 failed
        progress.failed(exc)
        return failure_exit(exc, exc, _newer(superseded))
    except Exception as exc:
        with contextlib.suppress(PhaseTwoError):  # the query's failure is the one to report
            foreach.drain()
        return failure_exit(progress.failure, exc, _newer(superseded))
    return 0


def _newer(superseded: Callable[[], int | None]) -> int | None:
    """``superseded()``, or None when the checkpoint cannot be read (the error is reported)."""
    try:
        return superseded()
    except Exception:
        log.warning("could not read the checkpoint's fence folder", exc_info=True)
        return None


def failure_exit(failure: BaseException | None, exc: Exception, newer_epoch: int | None) -> int:
    """Exit code and one-line reason for a query that died (Spark wraps the real cause).

    ``newer_epoch``: an epoch above this driver's recorded in the checkpoint's fence folder.
    """
    if isinstance(failure, FencedError):
        print(f"eo: {failure}", file=sys.stderr)
        return EXIT_FENCED
    if checkpoint_fence.fenced(exc):
        print(f"eo: fenced: {str(exc).strip().splitlines()[0]}", file=sys.stderr)
        return EXIT_FENCED
    if newer_epoch is not None:
        first = str(failure or exc).strip().splitlines()
        print(
            f"eo: fenced: epoch {newer_epoch} took over this checkpoint; this driver's query"
            f" then failed with: {first[0] if first else type(exc).__name__}",
            file=sys.stderr,
        )
        return EXIT_FENCED
    if isinstance(failure, (CheckpointResetError, CheckpointMismatchError)):
        print(f"eo: {failure}", file=sys.stderr)
        return EXIT_CHECKPOINT_RESET
    print(f"eo: streaming query failed: {failure or exc}", file=sys.stderr)
    return 1


def run_cli(args: argparse.Namespace) -> int:
    """``eo run``."""
    logs.configure(getattr(args, "log_format", None))
    if args.epoch <= 0:
        print("eo: --epoch must be a positive integer", file=sys.stderr)
        return 2
    try:
        pipeline = load(args)
        code = run(pipeline, args.epoch, args.available_now, args.metrics_port)
    except StartupError as exc:
        print(f"eo: {exc}", file=sys.stderr)
        return exc.code
    except FencedError as exc:
        print(f"eo: {exc}", file=sys.stderr)
        return EXIT_FENCED
    except (CheckpointResetError, CheckpointMismatchError) as exc:
        print(f"eo: {exc}", file=sys.stderr)
        return EXIT_CHECKPOINT_RESET
    sys.stdout.flush()
    # The JVM may hold non-daemon threads; the outcome is decided, so leave now.
    os._exit(code)
