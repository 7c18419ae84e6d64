"""The ``eo`` command line: one entry point for users, the driver pod and the operator pod.

Heavy imports (pyspark, kopf) happen inside the subcommands that need them, so ``eo validate``
and ``eo recover`` start fast and work in the operator image, which has no Spark.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

from eo_jobs import logs
from eo_jobs.exits import (
    EXIT_AUDIT_VIOLATION,
    EXIT_CODES,
    EXIT_DATABASE,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_MISSING_EXTRA,
    EXIT_NO_INPUT,
    EXIT_PRIVILEGE,
    EXIT_USAGE,
    CliError,
    explain,
)
from eo_jobs.protocol.errors import EXIT_SINK_CONTRACT
from eo_jobs.spec import InputError, Pipeline, SpecError, load_pipeline
from eo_jobs.spec.checks import TARGETS, check
from eo_jobs.spec.documents import source_name

__all__ = [
    "EXIT_DATABASE",
    "EXIT_INVALID",
    "EXIT_MISSING_EXTRA",
    "EXIT_NO_INPUT",
    "EXIT_PRIVILEGE",
    "EXIT_USAGE",
    "main",
    "parser",
]

DSN_HELP = (
    "Sink DSNs come from the environment: the variable a sink's dsn.env names, else "
    "EO_SINK_<NAME>_DSN (the sink name upper-cased, '-' as '_'), which the operator fills "
    "from the sink's Secret; a separate spec.control database from EO_CONTROL_DSN."
)


def _validate(args: argparse.Namespace) -> int:
    code = 0
    for path in args.files:
        try:
            pipeline = load_pipeline(path)
            problems = check(pipeline, args.target)
            if problems:
                raise SpecError(problems, source_name(path))
        except (InputError, SpecError) as exc:
            failed = _report(exc, args)
            code = code or failed or EXIT_INVALID
            continue
        print(
            f"OK {source_name(path)}: {pipeline.key} ({pipeline.spec.guarantee}, for {args.target})"
        )
        for warning in pipeline.spec.warnings():
            print(f"  warning: {warning}")
    return code


def _reachable(pipeline: Pipeline, dsns: dict[str, str]) -> list[str]:
    """Connect once to every database the command needs, naming the one that fails.

    Returns the database users the DSNs log in as (for messages about privileges).
    """
    from eo_jobs.sinks.kinds import kind_of
    from eo_jobs.sinks.postgres.binding import control_dsn
    from eo_jobs.sinks.postgres.credentials import CONTROL_ENV, env_var_for

    spec = pipeline.spec
    targets = [
        (f"sink {s.name!r}", s.target.dsn.env or env_var_for(s.name), dsns[s.name])
        for s in spec.sinks
    ]
    if spec.control is not None:
        targets.append(
            (
                "the control database",
                spec.control.dsn.env or CONTROL_ENV,
                control_dsn(pipeline, dsns),
            )
        )
    users: list[str] = []
    for what, variable, dsn in targets:
        try:
            users.append(kind_of(dsn).ping(dsn))
        except ValueError:
            raise CliError(
                f"{variable} (the DSN of {what}) is not a connection string: write "
                "postgresql://USER:PASSWORD@HOST:5432/DBNAME, 'host=HOST dbname=DB user=USER' or "
                "mysql://USER:PASSWORD@HOST:3306/DATABASE",
                EXIT_DATABASE,
            ) from None
        except ConnectionError as exc:
            raise CliError(
                f"cannot connect to the database of {what} (DSN from {variable}): "
                f"{' '.join(str(exc).split())}; check that the server is up and the DSN's host, "
                "port, user and password",
                EXIT_DATABASE,
            ) from None
    return sorted(set(users))


def _bound(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from eo_jobs.sinks.postgres.binding import bind, sink_dsns

    pipeline = load_pipeline(args.file)
    dsns = sink_dsns(pipeline)
    args.db_users = _reachable(pipeline, dsns)
    return pipeline, bind(pipeline, dsns)


def _recover(args: argparse.Namespace) -> int:
    from eo_jobs.protocol.recovery import recover

    _, bound = _bound(args)
    bound.claim()
    report = recover(bound.control, bound.stores, bound.pipeline, args.epoch, args.fence_owner)
    print(json.dumps(report.as_json(), indent=2))
    return 0 if report.left == 0 else 1


def _release_fence(args: argparse.Namespace) -> int:
    _, bound = _bound(args)
    control = bound.control
    fence = control.fence(bound.pipeline) if control.has_control_tables() else None
    released = fence is not None and control.release_fence(bound.pipeline, args.owner)
    shape = {
        "pipeline": bound.pipeline,
        "fence": None if fence is None else fence.epoch,
        "owner": None if fence is None else fence.owner,
        "released": released,
    }
    print(json.dumps(shape, indent=2))
    if not released:
        held = "no fence" if fence is None else f"the fence is owned by {fence.owner!r}"
        print(f"eo: {args.owner!r} does not own the fence of {bound.pipeline} ({held})",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from eo_jobs.protocol.recovery import sweep

    _, bound = _bound(args)
    _add_recorded_databases(bound)
    print(json.dumps(sweep(bound.control, bound.stores, bound.pipeline).as_json(), indent=2))
    return 0


def _add_recorded_databases(bound: Any) -> None:
    """Add the stores of databases the control database recorded for removed sinks.

    ``eo recover`` and the operator reach them through ``Bound.claim``; the sweep must create
    and record nothing, so it only reads the record (none without control tables) and resolves
    each credential reference here. One it cannot resolve is named on stderr and skipped.
    """
    from eo_jobs.protocol import registry
    from eo_jobs.protocol.databases import participant_store
    from eo_jobs.sinks.postgres.credentials import MissingCredentialError, resolve_dsn
    from eo_jobs.spec.models import CredentialRef

    if not bound.control.has_control_tables():
        return
    for old in registry.recorded(bound.control, bound.pipeline):
        if old.sink in bound.stores:
            continue
        try:
            dsn = resolve_dsn(old.sink, CredentialRef.model_validate(old.dsn_ref))
        except (MissingCredentialError, LookupError) as exc:
            print(
                f"eo: not swept: {old.label} (removed sink {old.sink}) is not reachable: {exc}",
                file=sys.stderr,
            )
            continue
        bound.stores[old.sink] = participant_store(dsn)
        bound.dsns[old.sink] = dsn


def _contract(pipeline: Pipeline, bound: Any) -> list[str]:
    """The sink contract check of every sink (its database kind's): one line per sink or per
    problem. Columns are not known without the source, so only the table's own rules run."""
    from eo_jobs.sinks.kinds import kind_of

    two_phase = pipeline.spec.guarantee == "exactly-once"
    lines: list[str] = []
    for sink in pipeline.spec.sinks:
        dsn = bound.dsns[sink.name]
        problems = kind_of(dsn).contract_problems(
            sink.target, dsn, (), two_phase=two_phase, dead_letter_table=None
        )
        lines.extend(f"{sink.name}: {problem}" for problem in problems)
        if not problems:
            lines.append(f"{sink.name}: OK ({sink.target.table} honours the sink contract)")
    return lines


def _named_columns(args: argparse.Namespace, sinks: Sequence[str]) -> dict[str, str]:
    """``--batch-column SINK=COLUMN`` options, each naming a sink of the pipeline."""
    columns: dict[str, str] = {}
    for item in args.batch_column or []:
        name, sep, column = item.partition("=")
        if not sep or not column:
            raise CliError(f"--batch-column {item!r}: write SINK=COLUMN", EXIT_USAGE)
        columns[name] = column
    named = {*columns, *(args.append_only or []), *_sum_columns(args), *(args.accumulates or [])}
    unknown = sorted(named - set(sinks))
    if unknown:
        raise CliError(
            f"no sink named {', '.join(unknown)} in the pipeline (sinks: {', '.join(sinks)})",
            EXIT_USAGE,
        )
    return columns


def _sum_columns(args: argparse.Namespace) -> dict[str, tuple[str, ...]]:
    """``--sum-columns SINK=C1,C2`` options (without a file: the spec declares sumColumns)."""
    columns: dict[str, tuple[str, ...]] = {}
    for item in getattr(args, "sum_columns", None) or []:
        name, sep, listed = item.partition("=")
        names = tuple(c.strip() for c in listed.split(",") if c.strip())
        if not sep or not names:
            raise CliError(f"--sum-columns {item!r}: write SINK=COLUMN[,COLUMN...]", EXIT_USAGE)
        columns[name] = columns.get(name, ()) + names
    return columns


def _env_dsn(variable: str, what: str) -> str:
    value = os.environ.get(variable)
    if not value:
        raise CliError(f"{variable} (the DSN of {what}) is not set", EXIT_USAGE)
    return value


def _audit_sources(args: argparse.Namespace) -> tuple[Any, Pipeline | None, Any]:
    """The audit's target from a pipeline file, or from --pipeline and --sink flags.

    Returns (AuditTarget, the pipeline or None, its bound endpoints or None). DSNs come from the
    environment either way, as for every command: a password never sits in argv.
    """
    from eo_jobs.audit import AuditTarget, SinkTarget
    from eo_jobs.sinks.postgres.credentials import CONTROL_ENV, env_var_for

    if args.file is not None:
        from eo_jobs.audit.targets import NotAppendOnlyError, target_for

        if args.sum_columns or args.accumulates:
            raise CliError(
                "--sum-columns and --accumulates describe a pipeline named by --pipeline: a "
                "pipeline file declares them (sinks[].postgres.sumColumns and mode accumulate)",
                EXIT_USAGE,
            )
        pipeline, bound = _bound(args)
        columns = _named_columns(args, [s.name for s in pipeline.spec.sinks])
        try:
            target = target_for(
                pipeline,
                bound.dsns,
                bound.control.dsn,
                append_only=args.append_only or [],
                batch_columns=columns,
                checkpoint=args.checkpoint,
                prepared_bound_seconds=getattr(args, "prepared_bound", 600.0),
            )
        except NotAppendOnlyError as exc:
            raise CliError(f"--append-only: {exc}", EXIT_USAGE) from None
        return target, pipeline, bound
    if not args.pipeline or not args.sink:
        raise CliError(
            "name a PIPELINE.yaml, or --pipeline NAMESPACE/NAME with one --sink NAME=SCHEMA.TABLE "
            "per sink",
            EXIT_USAGE,
        )
    pairs = [item.partition("=") for item in args.sink]
    if any(not sep or "." not in table for _, sep, table in pairs):
        raise CliError("--sink takes NAME=SCHEMA.TABLE", EXIT_USAGE)
    names = [name for name, _, _ in pairs]
    columns = _named_columns(args, names)
    sums = _sum_columns(args)
    both = sorted(set(args.append_only or []) & set(args.accumulates or []))
    if both:
        raise CliError(
            f"--accumulates and --append-only {', '.join(both)}: a table eo accumulates into "
            "updates its rows, so it is not append-only",
            EXIT_USAGE,
        )
    sinks = tuple(
        SinkTarget(
            name,
            _env_dsn(env_var_for(name), f"sink {name!r}"),
            table,
            append_only=name in (args.append_only or []),
            batch_column=columns.get(name),
            sum_columns=sums.get(name, ()),
            accumulates=name in (args.accumulates or []),
        )
        for name, _, table in pairs
    )
    control = os.environ.get(CONTROL_ENV) or sinks[0].dsn
    target = AuditTarget(
        args.pipeline, control, sinks, None, args.checkpoint, getattr(args, "prepared_bound", 600.0)
    )
    return target, None, None


def _start_position(args: argparse.Namespace, target: Any) -> Any:
    """Where this pass starts: --position FILE, else --since-batch for every query, else the
    beginning."""
    from pathlib import Path

    from eo_jobs.audit import Position
    from eo_jobs.protocol.databases import control_store
    from eo_jobs.protocol.gid import query_token

    if args.position and Path(args.position).exists():
        try:
            return Position.from_json(json.loads(Path(args.position).read_text(encoding="utf-8")))
        except (ValueError, AttributeError, TypeError) as exc:
            raise CliError(f"{args.position} is not a saved audit position: {exc}", 1) from None
    if args.since_batch is None:
        return None
    store = control_store(target.control_dsn)
    try:
        queries = store.queries(target.pipeline) if store.has_control_tables() else []
    finally:
        store.close()
    return Position({query_token(q): args.since_batch for q, _ in queries})


def _audit(args: argparse.Namespace) -> int:
    from pathlib import Path

    from eo_jobs.audit import audit
    from eo_jobs.audit.render import render

    target, pipeline, bound = _audit_sources(args)
    contract: list[str] = []
    if pipeline is not None and not args.skip_contract:
        contract = _contract(pipeline, bound)
    broken = any(not line.split(": ", 1)[1].startswith("OK (") for line in contract)
    result = audit(target, _start_position(args, target), max_batches=args.max_batches)
    if args.position:
        Path(args.position).write_text(json.dumps(result.end.as_json(), indent=2) + "\n")
    if args.json:
        shape = result.as_json()
        if pipeline is not None and not args.skip_contract:
            shape["contract"] = contract
        print(json.dumps(shape, indent=2))
    else:
        for line in contract:
            print(line)
        sys.stdout.write(render(result))
    if not result.ok:
        return EXIT_AUDIT_VIOLATION
    return EXIT_SINK_CONTRACT if broken else 0


def _reconcile(args: argparse.Namespace) -> int:
    from pathlib import Path

    from eo_jobs.audit import report

    target, pipeline, bound = _audit_sources(args)
    if pipeline is not None:
        from eo_jobs.audit.targets import report_sources_for

        sources = report_sources_for(pipeline, bound.dsns, target.control_dsn)
    else:
        dead = (target.sinks[0].dsn, args.dead_letter_table) if args.dead_letter_table else None
        sources = report.ReportSources(
            target.pipeline, target.control_dsn, {s.name: s.dsn for s in target.sinks}, dead
        )
    from eo_jobs.protocol.databases import kind

    if kind(sources.control_dsn) != "postgresql":
        raise CliError(
            f"eo report reads the decision log of a PostgreSQL control database only, and "
            f"{sources.pipeline}'s is {kind(sources.control_dsn)}: use eo audit, which reads "
            "both kinds, or give the pipeline a PostgreSQL spec.control",
            EXIT_USAGE,
        )
    if args.verify:
        try:
            saved = json.loads(Path(args.verify).read_text(encoding="utf-8"))
        except ValueError as exc:
            message = f"{args.verify} is not a JSON report (eo report --json): {exc}"
            raise CliError(message, 1) from None
        checked = report.verify(saved, sources)
        if args.json:
            print(json.dumps(checked.as_json(), indent=2))
        else:
            print(("OK: " if checked.ok else "DIFFERS: ") + checked.message)
        return 0 if checked.ok else EXIT_AUDIT_VIOLATION
    if not args.start or not args.end:
        raise CliError("eo report needs --from and --to (or --verify FILE)", EXIT_USAGE)
    try:
        start, end = report.parse_time(args.start), report.parse_time(args.end)
    except ValueError as exc:
        message = f"--from/--to take ISO 8601 times (2026-11-01T00:00Z): {exc}"
        raise CliError(message, EXIT_USAGE) from None
    try:
        built = report.build(sources, start, end)
    except report.NoDecisionLogError as exc:
        raise CliError(str(exc), 1) from None
    sys.stdout.write(json.dumps(built, indent=2) + "\n" if args.json else report.render(built))
    return 0


def _forget(args: argparse.Namespace) -> int:
    _, bound = _bound(args)
    control = bound.control
    known = control.queries(bound.pipeline) if control.has_control_tables() else []
    if args.query_id not in {query for query, _ in known}:
        listed = ", ".join(f"{q} (last batch {b})" for q, b in known) or "none"
        print(
            f"eo: no decisions of query {args.query_id} for {bound.pipeline} in its control "
            f"database (queries with decisions: {listed}); nothing to forget",
            file=sys.stderr,
        )
        return 1
    if not args.yes:
        print(
            "forget-query deletes decisions; re-run with --yes if the stream really "
            "starts over (data already written stays in the sink)",
            file=sys.stderr,
        )
        return 2
    count = control.forget_query(bound.pipeline, args.query_id)
    print(json.dumps({"pipeline": bound.pipeline, "query_id": args.query_id, "deleted": count}))
    return 0


def _crd(_args: argparse.Namespace) -> int:
    from eo_jobs.spec.crd import crd_yaml

    sys.stdout.write(crd_yaml())
    return 0


def _run(args: argparse.Namespace) -> int:
    from eo_jobs.protocol.control import FENCE_OWNER_ENV
    from eo_jobs.runtime.main import run_cli

    if args.fence_owner:
        os.environ[FENCE_OWNER_ENV] = args.fence_owner  # the driver's input, as on Kubernetes
    return run_cli(args)


def _demo(args: argparse.Namespace) -> int:
    from eo_jobs.runtime.demo import demo_cli

    return demo_cli(args)


def _operator(args: argparse.Namespace) -> int:
    from eo_operator.main import operator_cli

    return operator_cli(args)


class _Formatter(argparse.HelpFormatter):
    """Wraps descriptions, keeps the exit-code table as written, and shows every option's
    default as ArgumentDefaultsHelpFormatter does (not for flags and unset options)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text == EXIT_CODES:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        shown = action.default not in (None, False, [], argparse.SUPPRESS)
        if shown and "%(default)" not in text and (action.option_strings or action.nargs == "?"):
            text += " (default: %(default)s)"
        return text


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _version() -> str:
    names = metadata.packages_distributions().get("eo_jobs", ["eo"])
    return f"eo {metadata.version(names[0])}"


def _leader_election_options(p: argparse.ArgumentParser) -> None:
    """``eo operator``'s Lease options (the chart passes them; replicas: one leads)."""
    p.add_argument("--peering", default=None, help="kopf peering name (one operator only; not HA)")
    p.add_argument(
        "--leader-election",
        default=None,
        metavar="LEASE",
        help="act only while holding this coordination.k8s.io Lease (replicas: one leads)",
    )
    p.add_argument(
        "--lease-namespace", default=None, help="namespace of the Lease (default: $POD_NAMESPACE)"
    )
    p.add_argument(
        "--lease-duration", type=float, default=15.0, help="seconds a lease lasts unless renewed"
    )
    p.add_argument(
        "--renew-deadline",
        type=float,
        default=10.0,
        help="a leader that has not renewed for this many seconds exits",
    )
    p.add_argument(
        "--retry-period",
        type=float,
        default=2.0,
        help="seconds between renewals, and between tries of a standby",
    )


def _fence_commands(
    command: Callable[..., argparse.ArgumentParser],
    pipeline_file: Callable[[argparse.ArgumentParser], None],
) -> None:
    """``eo recover`` and ``eo release-fence``: the fence by hand."""
    p = command(
        "recover",
        "fence to an epoch and resolve prepared transactions (prints a JSON summary)",
        "Raise the sink fence of the pipeline to EPOCH (never lower), then commit every "
        "prepared transaction named by a decision and roll back every other one left by older "
        f"epochs. Exits 1 if some are left (see 'left'). {DSN_HELP}",
    )
    pipeline_file(p)
    p.add_argument(
        "--epoch",
        type=_positive,
        required=True,
        help="new epoch: higher than any driver that may still be running (the pipeline's "
        "eo.dev/epoch annotation plus one)",
    )
    p.add_argument(
        "--fence-owner",
        default=None,
        metavar="OWNER",
        help="also claim the fence for OWNER, for an `eo run --fence-owner OWNER` to follow "
        "(refused while another writer owns it); without it the fence is only raised and "
        "keeps its owner",
    )
    p.set_defaults(func=_recover)

    p = command(
        "release-fence",
        "hand a pipeline's sink fence over: let go of it for a writer that is gone",
        "Release the sink fence of the pipeline if OWNER holds it (its epoch stays), so the "
        "pipeline's other writer (its object in another cluster, a restored object, waiting "
        "with condition FenceOwned=False) takes it above that epoch. OWNER is the owner that "
        "condition names (a pipeline object's UID). Stop that writer for good first: its "
        "drivers are fenced as soon as the other one starts. Exits 1 if OWNER does not hold "
        f"the fence. {DSN_HELP}",
    )
    pipeline_file(p)
    p.add_argument("--owner", required=True, help="the owner to release the fence from")
    p.set_defaults(func=_release_fence)


def _audit_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """``eo audit`` and ``eo report``: the exactly-once evidence, read and shown."""
    p = command(
        "audit",
        "audit the decision log, markers and sinks; check the sink contract",
        "Check each sink's table and database against the contract (the table exists and is "
        "logged, keys for upsert, max_prepared_transactions, privileges for schema eo; exit 77 "
        "if a sink cannot honour it), then audit every batch decided since the position: "
        "source offsets contiguous, every participant committed with its rows and none stuck "
        "prepared, no batch missing or decided twice, epochs never going down, no committed "
        "participant without a decision, and, for tables declared --append-only, the table's "
        "count (docs/audit.md). Prints which checks ran and which could not, and every "
        f"violation with its batch; exits 78 on a violation. Reads only. {DSN_HELP}",
    )
    _audit_target_options(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--position",
        metavar="FILE",
        default=None,
        help="start where the position saved in FILE says, and save the new one there (for "
        "a periodic audit); a missing FILE starts at the beginning",
    )
    p.add_argument(
        "--since-batch",
        type=int,
        default=None,
        metavar="N",
        help="audit the batches after N of every query (without --position)",
    )
    p.add_argument(
        "--max-batches",
        type=_positive,
        default=None,
        metavar="N",
        help="audit at most N batches per query in this pass (the rest next time)",
    )
    p.add_argument(
        "--prepared-bound",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="a decided participant still prepared this long after its decision is a violation",
    )
    p.add_argument(
        "--skip-contract",
        action="store_true",
        help="skip the sink contract check (a read-only auditor role fails its privilege part)",
    )
    p.set_defaults(func=_audit)

    p = command(
        "report",
        "reconciliation report of a time window, with a hash chain; or verify a saved one",
        "Print the batches decided in [--from, --to): source ranges, rows per sink, dead "
        "letters, the epochs that decided them and the recoveries (failed attempts), with a "
        "SHA-256 hash chain over the batches. Save it with --json; later, --verify FILE re-reads "
        "the database for the saved window and names the first batch that no longer matches "
        f"(exit 78). Reads only. {DSN_HELP}",
    )
    _audit_target_options(p)
    p.add_argument("--from", dest="start", default=None, metavar="T1", help="ISO 8601 time")
    p.add_argument("--to", dest="end", default=None, metavar="T2", help="ISO 8601 time")
    p.add_argument("--json", action="store_true", help="print JSON (the form --verify reads)")
    p.add_argument("--verify", metavar="FILE", default=None, help="a report saved with --json")
    p.add_argument(
        "--dead-letter-table",
        default=None,
        metavar="SCHEMA.TABLE",
        help="with --pipeline: the dead-letter table, in the first sink's database",
    )
    p.set_defaults(func=_reconcile)


def _audit_target_options(p: argparse.ArgumentParser) -> None:
    """``eo audit`` and ``eo report``: a pipeline file, or the pipeline named by flags."""
    p.add_argument(
        "file",
        metavar="PIPELINE.yaml",
        nargs="?",
        default=None,
        help="pipeline file, - reads stdin (or name the pipeline with --pipeline and --sink)",
    )
    p.add_argument("--pipeline", default=None, metavar="NAMESPACE/NAME", help="without a file")
    p.add_argument(
        "--sink",
        action="append",
        default=[],
        metavar="NAME=SCHEMA.TABLE",
        help="without a file: a sink and its table (repeat per sink; the first holds the "
        "control tables unless $EO_CONTROL_DSN is set)",
    )
    p.add_argument(
        "--append-only",
        action="append",
        default=[],
        metavar="SINK",
        help="declare that only this pipeline writes SINK's table and only appends: enables "
        "its count check (repeat per sink)",
    )
    p.add_argument(
        "--batch-column",
        action="append",
        default=[],
        metavar="SINK=COLUMN",
        help="a column of SINK's table holding each row's batch id: checks rows per batch",
    )
    p.add_argument(
        "--sum-columns",
        action="append",
        default=[],
        metavar="SINK=COLUMN[,COLUMN...]",
        help="without a file: SINK's sumColumns, whose sums eo records per batch: checks them "
        "per batch (with --batch-column) and table-wide (append-only or --accumulates)",
    )
    p.add_argument(
        "--accumulates",
        action="append",
        default=[],
        metavar="SINK",
        help="without a file: SINK is mode accumulate, so its table's sums move by the "
        "batches' (the table-wide sum check)",
    )
    p.add_argument(
        "--checkpoint",
        default=None,
        metavar="LOCATION",
        help="Spark's checkpoint, if readable here as a folder (default: the spec's location)",
    )


def parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for docs and tests)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the traceback behind an error",
    )
    common.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        default=argparse.SUPPRESS,
        help=f"log records as JSON lines (for a log pipeline) or text (for a terminal); "
        f"overrides ${logs.FORMAT_ENV} (default: ${logs.FORMAT_ENV}, else json)",
    )
    top = argparse.ArgumentParser(
        prog="eo",
        description="Exactly-once Spark Structured Streaming pipelines on Kubernetes.",
        epilog=EXIT_CODES,
        formatter_class=_Formatter,
        parents=[common],
    )
    top.add_argument("--version", action="version", version=_version())
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, description: str, **kw: Any) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=summary,
            description=description,
            epilog=EXIT_CODES,
            formatter_class=_Formatter,
            parents=[common],
            **kw,
        )

    def pipeline_file(p: argparse.ArgumentParser) -> None:
        p.add_argument("file", metavar="PIPELINE.yaml", help="pipeline file; - reads stdin")

    p = command(
        "validate",
        "check pipeline YAML files; prints OK or every error",
        "Check pipeline files before `kubectl apply` or `eo run`: the schema (as the API "
        "server reads it: one document, no repeated keys, strict types), the source schema "
        "and the transform SQL (Spark dialect, declared columns only), and, for Kubernetes, "
        "Secret-backed credentials and a checkpoint that outlives the driver pod. Every "
        "problem is printed with its field path; a file that passes prints OK.",
    )
    p.add_argument(
        "files", nargs="+", metavar="PIPELINE.yaml", help="pipeline files; - reads stdin"
    )
    p.add_argument(
        "--for",
        dest="target",
        choices=TARGETS,
        default="kubernetes",
        help="where the pipeline runs: kubernetes (kubectl apply; the operator runs it) or "
        "local (eo run on this machine, credentials from env variables)",
    )
    p.set_defaults(func=_validate)

    _fence_commands(command, pipeline_file)

    p = command(
        "sweep",
        "resolve prepared transactions below the fence (safe anytime)",
        "Commit or roll back the prepared transactions of epochs below the fence, as their "
        "decisions say; the live epoch's are left to its driver. Prints a JSON summary. "
        f"{DSN_HELP}",
    )
    pipeline_file(p)
    p.set_defaults(func=_sweep)

    _audit_commands(command)

    p = command(
        "forget-query",
        "delete a streaming query's decisions (start over)",
        "Delete the decisions of one Spark streaming query, for a stream that really starts "
        "over with a new checkpoint (the driver refuses to start with exit 76 while the "
        "decision log holds another query's batches). Data already written stays in the "
        f"sinks. {DSN_HELP}",
    )
    pipeline_file(p)
    p.add_argument(
        "--query-id",
        required=True,
        help="the query whose decisions to delete: the driver logs it in its query-started "
        "line and the checkpoint-reset error names it; an unknown id lists the known ones",
    )
    p.add_argument("--yes", action="store_true", help="really delete")
    p.set_defaults(func=_forget)

    p = command(
        "crd",
        "print the generated CustomResourceDefinition YAML",
        "Print the ExactlyOncePipeline CRD generated from eo's models (what "
        "crds/exactlyoncepipelines.eo.dev.yaml and the chart ship).",
    )
    p.set_defaults(func=_crd)

    p = command(
        "run",
        "run the pipeline's Spark driver with an epoch",
        "Run the pipeline's Spark driver (needs the spark extra and Java 17+). On Kubernetes "
        "the operator starts it; locally, credentials come from the env variables the spec "
        "names.",
    )
    p.add_argument(
        "file",
        metavar="PIPELINE.yaml",
        nargs="?",
        help="pipeline file, - for stdin (default: the spec in $EO_PIPELINE_SPEC)",
    )
    p.add_argument("--epoch", type=_positive, required=True, help="fencing epoch of this driver")
    p.add_argument(
        "--fence-owner",
        default=None,
        metavar="OWNER",
        help="the writer this driver runs for (default: $EO_FENCE_OWNER, which the operator "
        "sets to the pipeline object's UID); without one the driver runs only under a fence "
        "nobody owns",
    )
    p.add_argument(
        "--available-now", action="store_true", help="process what is available, then exit 0"
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics on this port, 0 = off (default: spec.driver.metricsPort)",
    )
    p.set_defaults(func=_run)

    p = command(
        "demo",
        "embedded PostgreSQL + local Spark + crashes + audit",
        "Generate order events, run a pipeline into an embedded PostgreSQL with injected "
        "crashes, and audit that every event landed exactly once (needs the spark and embedded "
        "extras and Java 17+; `./dev demo` installs them).",
    )
    p.add_argument("--events", type=int, default=200_000, help="order events to generate")
    p.add_argument("--workdir", default=None, help="keep files here instead of a temp folder")
    p.add_argument("--seed", type=int, default=7, help="seed of the events and the crashes")
    p.set_defaults(func=_demo)

    p = command(
        "operator",
        "run the Kubernetes operator (kopf)",
        "Run the operator (needs the operator extra): it watches ExactlyOncePipelines, "
        "launches and fences drivers, and recovers in-doubt transactions.",
    )
    p.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="watch only this namespace; repeat for more (default: all)",
    )
    p.add_argument("--metrics-port", type=int, default=9090, help="Prometheus metrics port")
    p.add_argument("--liveness-port", type=int, default=8080, help="kopf liveness probe port")
    p.add_argument(
        "--workers",
        type=_positive,
        default=32,
        help="reconcile passes run at once, in threads (deletions get half as many of their "
        "own); pipelines beyond it wait their turn, never a thread each (default: 32)",
    )
    _leader_election_options(p)
    p.set_defaults(func=_operator)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``eo`` script."""
    args = parser().parse_args(argv)
    try:
        _log_format(args)
    except ValueError as exc:
        print(f"eo: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("eo: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        code = _report(exc, args)
        if code is None:
            raise
        return code


def _log_format(args: argparse.Namespace) -> None:
    """Log as ``--log-format`` (else ``$EO_LOG_FORMAT``, else JSON) says, for every command.

    The option is also exported as ``$EO_LOG_FORMAT``, so the processes a command starts (the
    demo's drivers) log the same way.
    """
    fmt = getattr(args, "log_format", None)
    logs.configure(fmt)
    if fmt:
        os.environ[logs.FORMAT_ENV] = fmt


def _report(exc: Exception, args: argparse.Namespace) -> int | None:
    """Print an ordinary failure in one line (after its traceback with --debug); its code."""
    explained = explain(exc, args.command, getattr(args, "db_users", []))
    if explained is None:
        return None
    if getattr(args, "debug", False):
        traceback.print_exc()
    code, message = explained
    print(message, file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
