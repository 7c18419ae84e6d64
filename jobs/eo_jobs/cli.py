"""The ``eo`` command line: one entry point for users, the driver pod and the operator pod.

Heavy imports (pyspark, kopf) happen inside the subcommands that need them, so ``eo validate``
and ``eo recover`` start fast and work in the operator image, which has no Spark.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from eo_jobs.protocol.errors import EXIT_CHECKPOINT_RESET, EXIT_FENCED, EXIT_SINK_CONTRACT
from eo_jobs.spec import SpecError, load_pipeline

EXIT_CODES = f"""exit codes:
  0   success
  1   failure (the cause is printed on stderr)
  2   usage error
  {EXIT_FENCED}  fenced: a newer epoch owns the pipeline (a zombie driver stopping)
  {EXIT_CHECKPOINT_RESET}  the checkpoint does not match the decision log
  {EXIT_SINK_CONTRACT}  a sink cannot honour the exactly-once contract
"""


def _validate(args: argparse.Namespace) -> int:
    failed = False
    for path in args.files:
        try:
            pipeline = load_pipeline(Path(path))
        except SpecError as exc:
            failed = True
            print(exc, file=sys.stderr)
            continue
        print(f"OK {path}: {pipeline.key} ({pipeline.spec.guarantee})")
        for warning in pipeline.spec.warnings():
            print(f"  warning: {warning}")
    return 1 if failed else 0


def _bound(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from eo_jobs.sinks.postgres.binding import bind, sink_dsns

    pipeline = load_pipeline(Path(args.file))
    return pipeline, bind(pipeline, sink_dsns(pipeline))


def _recover(args: argparse.Namespace) -> int:
    from eo_jobs.protocol.recovery import recover

    _, bound = _bound(args)
    bound.claim()
    report = recover(bound.control, bound.stores, bound.pipeline, args.epoch)
    print(json.dumps(report.as_json(), indent=2))
    return 0 if report.left == 0 else 1


def _sweep(args: argparse.Namespace) -> int:
    from eo_jobs.protocol.recovery import sweep

    _, bound = _bound(args)
    print(json.dumps(sweep(bound.control, bound.stores, bound.pipeline).as_json(), indent=2))
    return 0


def _audit(args: argparse.Namespace) -> int:
    import psycopg

    from eo_jobs.sinks.postgres.contract import check_contract

    pipeline, bound = _bound(args)
    two_phase = pipeline.spec.guarantee == "exactly-once"
    bad = False
    for sink in pipeline.spec.sinks:
        with psycopg.connect(bound.dsns[sink.name], autocommit=True) as conn:
            problems = check_contract(
                conn,
                sink.postgres.table,
                mode=sink.postgres.mode,
                key_columns=sink.postgres.key_columns,
                two_phase=two_phase,
            )
        for problem in problems:
            bad = True
            print(f"{sink.name}: {problem}")
        if not problems:
            print(f"{sink.name}: OK ({sink.postgres.table} honours the sink contract)")
    return EXIT_SINK_CONTRACT if bad else 0


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
    from eo_jobs.runtime.main import run_cli

    return run_cli(args)


def _demo(args: argparse.Namespace) -> int:
    from eo_jobs.runtime.demo import demo_cli

    return demo_cli(args)


def _operator(args: argparse.Namespace) -> int:
    from eo_operator.main import operator_cli

    return operator_cli(args)


def parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for docs and tests)."""
    top = argparse.ArgumentParser(
        prog="eo",
        description="Exactly-once Spark Structured Streaming pipelines on Kubernetes.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check pipeline YAML files; prints OK or every error")
    p.add_argument("files", nargs="+", metavar="PIPELINE.yaml")
    p.set_defaults(func=_validate)

    p = sub.add_parser(
        "recover",
        help="fence to an epoch and resolve prepared transactions (prints a JSON summary)",
        description="Raise the sink fence of the pipeline to EPOCH (never lower), then commit "
        "every prepared transaction named by a decision and roll back every other one left "
        "by older epochs. Sink DSNs come from the environment variables the spec names.",
    )
    p.add_argument("file", metavar="PIPELINE.yaml")
    p.add_argument(
        "--epoch",
        type=int,
        required=True,
        help="new epoch: higher than any driver that may still be running",
    )
    p.set_defaults(func=_recover)

    p = sub.add_parser("sweep", help="resolve prepared transactions below the fence (safe anytime)")
    p.add_argument("file", metavar="PIPELINE.yaml")
    p.set_defaults(func=_sweep)

    p = sub.add_parser("audit", help="check that every sink honours the exactly-once contract")
    p.add_argument("file", metavar="PIPELINE.yaml")
    p.set_defaults(func=_audit)

    p = sub.add_parser("forget-query", help="delete a streaming query's decisions (start over)")
    p.add_argument("file", metavar="PIPELINE.yaml")
    p.add_argument("--query-id", required=True)
    p.add_argument("--yes", action="store_true", help="really delete")
    p.set_defaults(func=_forget)

    p = sub.add_parser("crd", help="print the generated CustomResourceDefinition YAML")
    p.set_defaults(func=_crd)

    p = sub.add_parser(
        "run",
        help="run the pipeline's Spark driver with an epoch",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "file",
        metavar="PIPELINE.yaml",
        nargs="?",
        help="pipeline file (default: the spec in $EO_PIPELINE_SPEC)",
    )
    p.add_argument("--epoch", type=int, required=True, help="fencing epoch of this driver")
    p.add_argument(
        "--available-now", action="store_true", help="process what is available, then exit 0"
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics on this port (0 = off)",
    )
    p.set_defaults(func=_run)

    p = sub.add_parser("demo", help="embedded PostgreSQL + local Spark + crashes + audit")
    p.add_argument("--events", type=int, default=200_000, help="order events to generate")
    p.add_argument("--workdir", default=None, help="keep files here instead of a temp folder")
    p.add_argument("--seed", type=int, default=7)
    p.set_defaults(func=_demo)

    p = sub.add_parser("operator", help="run the Kubernetes operator (kopf)")
    p.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="watch only these namespaces (default: all)",
    )
    p.add_argument("--metrics-port", type=int, default=9090)
    p.add_argument("--liveness-port", type=int, default=8080)
    p.add_argument("--peering", default=None, help="kopf peering name for leader election")
    p.set_defaults(func=_operator)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``eo`` script."""
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 1
    except LookupError as exc:
        print(f"eo: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
