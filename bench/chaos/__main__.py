"""``python -m bench.chaos``: random faults against a running pipeline, then the audit.

With no options it runs the embedded defaults (local Spark, an embedded PostgreSQL, a generated
stream) for 5 minutes. The last line reads
``faults: 512, kinds: 6, batches: 3013, violations: 0, seed: 4242``; the exit code is 1 when any
violation was found, and the seed repeats the same choice of faults.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.chaos.faults import KINDS, MYSQL_KINDS
from bench.chaos.operator_faults import EXECUTOR_KINDS
from bench.chaos.operator_faults import KINDS as OPERATOR_KINDS
from bench.chaos.operator_mode import run_operator
from bench.chaos.run import Plan, Summary, run
from eo_jobs.audit import Check


def _kubelet_can_mount() -> bool:
    """Whether the test kubelet can bind-mount the executor pods' volumes (the claim holding
    input and checkpoint, Spark's ConfigMap): its own answer, imported only when asked."""
    from tests.cluster.podapi import can_mount

    return can_mount()


def main(argv: list[str] | None = None) -> int:
    """Parse options, run, print the summary; non-zero exit on any violation."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos",
        description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--seed", type=int, default=None, help="default: from the clock")
    parser.add_argument("--minutes", type=float, default=None, help="stop after this long")
    parser.add_argument("--faults", type=int, default=None, help="stop after this many faults")
    parser.add_argument(
        "--kinds", default=None, help="comma-separated fault kinds; all of the mode's if not given"
    )
    parser.add_argument(
        "--source", choices=("files", "kafka"), default="files", help="where the stream comes from"
    )
    parser.add_argument(
        "--mode",
        choices=("driver", "operator"),
        default="driver",
        help="driver: the harness relaunches drivers as the operator would; operator: the real "
        "operator on the test control plane does every recovery",
    )
    parser.add_argument(
        "--executors",
        type=int,
        default=0,
        help="operator mode: executor pods of the pipeline (adds the executor-delete kind); "
        "0 runs the writers inside the driver",
    )
    parser.add_argument(
        "--sink",
        choices=("postgres", "mysql"),
        default="postgres",
        help="mysql: the append and upsert sinks in a MariaDB server started for the run (adds "
        "its restart and dropped-connection faults); driver mode only",
    )
    parser.add_argument("--workdir", default=None, help="kept after the run; else a temporary one")
    args = parser.parse_args(argv)
    if args.executors < 0 or (args.executors and args.mode != "operator"):
        parser.error("--executors takes a count >= 0, and only with --mode operator")
    if args.executors and not _kubelet_can_mount():
        parser.error(
            "--executors needs root: the executor pods' volumes are bind-mounted by the test "
            "kubelet (unshare --mount); run as root, or leave --executors out"
        )
    if args.sink == "mysql" and args.mode != "driver":
        parser.error("--sink mysql runs in --mode driver only")
    known = list(OPERATOR_KINDS if args.mode == "operator" else KINDS)
    if args.sink == "mysql":
        known += list(MYSQL_KINDS)
    if not args.executors:
        known = [k for k in known if k not in EXECUTOR_KINDS]
    kinds = [k for k in (args.kinds or ",".join(known)).split(",") if k]
    unknown = sorted(set(kinds) - set(known))
    if unknown:
        parser.error(
            f"unknown fault kinds {unknown} for --mode {args.mode} with --executors "
            f"{args.executors}; known: {known}"
        )
    seed = args.seed if args.seed is not None else time.time_ns() % 100_000
    minutes = args.minutes if args.minutes is not None or args.faults is not None else 5.0
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="eo-chaos-"))
    print(
        f"chaos: seed {seed}, mode {args.mode}, source {args.source}, sink {args.sink}, "
        f"executors {args.executors}, kinds {', '.join(kinds)}, work {work}",
        flush=True,
    )
    plan = Plan(seed, minutes, args.faults, kinds, args.source, args.executors, args.sink)
    summary = run_operator(plan, work) if args.mode == "operator" else run(plan, work)
    print_summary(summary)
    if not args.workdir and not summary.violations():
        shutil.rmtree(work, ignore_errors=True)
    return 1 if summary.violations() else 0


def print_summary(summary: Summary) -> None:
    """The table, then one line a script can read."""
    f = summary.findings
    rows: list[tuple[str, object]] = [
        ("faults", sum(summary.faults.values())),
        *((f"  {kind}", count) for kind, count in sorted(summary.faults.items())),
        ("outcomes", ""),
        *((f"  {what}", count) for what, count in sorted(summary.outcomes.items())),
        ("recoveries the harness drove", sum(summary.relaunches.values())),
        *((f"  {why}", count) for why, count in sorted(summary.relaunches.items())),
        ("batches decided", f.batches),
        ("records generated (valid)", summary.records),
        ("rows in the append sink", f.rows),
        ("dead letters", f.dead_letters),
        ("eo audit passes (one after each fault)", summary.audit.passes),
        ("  batches they audited", summary.audit.batches),
        ("  passes that failed (a database down)", summary.audit.errors),
        ("wall time (s)", round(summary.seconds)),
    ]
    violations = summary.violations()
    checked = [
        "duplicates",
        "missing",
        "unexpected",
        "wrong_values",
        "sum_mismatches",
        "latest_wrong",
        "totals_wrong",
        "dead_letter_duplicates",
        "dead_letters_missing",
        "prepared_left",
        "epoch_regressions",
        "batches_decided_twice",
        "stalls",
        "duplicates_seen_during_run",
        *(f"audit_{check}" for check in Check),
    ]
    rows += [("violations", sum(violations.values()))]
    rows += [(f"  {name}", violations.get(name, 0)) for name in checked]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value!s:>8}")
    print(f"eo audit checks that ran in full: {', '.join(sorted(summary.audit.ran))}")
    for reason in sorted(summary.audit.not_run):
        print(f"eo audit did not run in full: {reason}")
    print(
        f"faults: {sum(summary.faults.values())}, kinds: {len(summary.faults)}, "
        f"batches: {f.batches}, violations: {sum(violations.values())}, seed: {summary.seed}"
    )


if __name__ == "__main__":
    sys.exit(main())
