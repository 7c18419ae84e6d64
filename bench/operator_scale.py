"""How the operator scales with the number of pipelines (issue 11 item 1).

One real control plane (etcd, kube-apiserver, kube-controller-manager, the process kubelet,
``tests/cluster``), one embedded PostgreSQL server and one ``eo operator`` process under the
chart's ServiceAccount, as the operator's cluster tests run it. Pipelines are added in steps
(100, 500, 1,000 by default) to one namespace, all writing to one database: most suspended
(a recovery, then idle passes), a share running a stand-in driver (a Running driver pod whose
process only sleeps: the process kubelet finds ``eo`` on the pod's ``PATH``, set by the pod
template; no JVM, so the figures are the operator's, not Spark's). After each step, once every
pipeline is in its phase, a window of ``--window`` seconds measures:

- **RSS MiB**: the operator process's resident memory at the end of the window;
- **CPU %**: its CPU time over the window (100 = one core);
- **op API/s**: requests the operator's passes and deletions sent to the API server
  (``eo_operator_api_requests_total``; kopf's watches not included);
- **all API/s**: every non-watch request the API server served (``apiserver_request_total``:
  the kubelet and the controller manager included);
- **sink xact/s**, **sink conn/s**: transactions and new sessions in the sink database
  (``pg_stat_database``), i.e. the operator's sink queries (the stand-ins write nothing);
- **fresh p50/p95 s**: the age of every pipeline's ``eo_pipeline_last_observed_timestamp_seconds``
  (when a pass last observed it; status is written only when it changes), sampled every 5 s;
- **settle s**: from applying the step's new pipelines to all of them in their phase;
- **audit**: whether the continuous audit was on (``spec.audit.enabled``) in the window; with
  ``--audit both`` each step is measured with it on, then (the same pipelines, the same load)
  with it off, and a second table gives its cost: the CPU it adds, per pass and per audited
  batch, and at the chart's default interval (300 s);
- **passes/s**, **audited/s**, **pass s**: audit passes and decided batches they read per
  second, and a pass's mean wall time (``eo_audit_pass_duration_seconds``,
  ``eo_audit_batches_total``).

So that the audit reads real evidence, every pipeline writes to a table of its own with an
``auditColumn``, and is given ``--seed-batches`` decided batches through eo's protocol before
the operator sees it; while the bench runs, the running pipelines' batches (one each per
``--feed-every`` seconds, under the fence epoch and owner the operator set) are written the same
way (``bench/audit_load.py``), so each pass has new decisions, markers and rows to check.

Usage: ``python -m bench.operator_scale [--steps 100 500 1000] [--window 60] [--audit both]``.
It needs the cluster tools and PostgreSQL from ``./dev setup``, and prints a Markdown table with the
machine's load average next to it (the figures depend on what else runs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
import urllib.request
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg
from prometheus_client.parser import text_string_to_metric_families

from bench.audit_load import AUDIT_COLUMN, Feeder, PipelineWriter, create_tables, seed, table_of
from eo_jobs.pgserver import temporary_server

NAMESPACE = "scale"
DSN_REF = "scale-db"
"""The Secret holding the sink DSN."""
STAND_IN = "#!/bin/sh\nexec sleep 86400\n"


@dataclass(frozen=True)
class Row:
    """One step's figures."""

    pipelines: int
    running: int
    settle_s: float
    rss_mib: float
    cpu_percent: float
    operator_api_per_s: float
    apiserver_api_per_s: float
    sink_xact_per_s: float
    sink_sessions_per_s: float
    fresh_p50_s: float
    fresh_p95_s: float
    fresh_max_s: float
    load_1m: float
    audit: str = "on"
    audit_passes_per_s: float = 0.0
    audit_batches_per_s: float = 0.0
    audit_pass_s: float = 0.0
    audit_cpu_percent: float = 0.0
    """CPU of the operator's auditing threads alone (``eo_audit_cpu_seconds_total``)."""
    audit_cpu_ms_per_pass: float = 0.0


def manifest(
    name: str, work: Path, stand_in: Path | None, audit: bool = True, interval: int = 300
) -> dict[str, Any]:
    """A pipeline: suspended, or running the stand-in driver; audited every ``interval`` s."""
    spec: dict[str, Any] = {
        "source": {
            "files": {
                "path": str(work / "in"),
                "format": "json",
                "schema": "order_id BIGINT, merchant STRING, amount_cents BIGINT",
            }
        },
        "sinks": [
            {
                "name": "orders",
                "postgres": {
                    "dsn": {"secretKeyRef": {"name": DSN_REF, "key": "dsn"}},
                    "table": table_of(name),
                    "auditColumn": AUDIT_COLUMN,
                },
            }
        ],
        "checkpoint": {"location": str(work / "checkpoints" / name)},
        "driver": {"cores": 1, "memory": "512m"},
        "suspend": stand_in is None,
        "audit": {"enabled": audit, "intervalSeconds": interval},
    }
    if stand_in is not None:
        env = [{"name": "PATH", "value": f"{stand_in}{os.pathsep}{os.environ['PATH']}"}]
        spec["driver"]["podTemplate"] = {"spec": {"containers": [{"name": "driver", "env": env}]}}
    return {
        "apiVersion": "eo.dev/v1alpha1",
        "kind": "ExactlyOncePipeline",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


class Probe:
    """Reads the figures from the operator, the API server and PostgreSQL."""

    def __init__(self, cluster: Any, operator: Any, dsn: str) -> None:
        self.cluster = cluster
        self.operator = operator
        self.dsn = dsn
        self.pid = int(operator.proc.pid)

    def operator_metrics(self) -> list[Any]:
        url = f"http://127.0.0.1:{self.operator.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as response:
            return list(text_string_to_metric_families(response.read().decode()))

    def operator_requests(self) -> float:
        return sum(  # type: ignore[no-any-return]
            s.value
            for f in self.operator_metrics()
            if f.name == "eo_operator_api_requests"
            for s in f.samples
            if s.name.endswith("_total")
        )

    def audit_counters(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Each pipeline's audit pass count, pass seconds and audited batches, by series."""
        wanted = (
            "eo_audit_pass_duration_seconds_count",
            "eo_audit_pass_duration_seconds_sum",
            "eo_audit_batches_total",
            "eo_audit_cpu_seconds_total",
        )
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in self.operator_metrics()
            for s in f.samples
            if s.name in wanted
        }

    def ages(self) -> list[float]:
        now = time.time()
        return [
            now - s.value
            for f in self.operator_metrics()
            if f.name == "eo_pipeline_last_observed_timestamp_seconds"
            for s in f.samples
        ]

    def apiserver_requests(self) -> float:
        text = self.cluster.kubectl("get", "--raw", "/metrics").stdout
        return sum(
            s.value
            for f in text_string_to_metric_families(text)
            if f.name == "apiserver_request"
            for s in f.samples
            if s.name == "apiserver_request_total"
            and s.labels.get("verb") not in ("WATCH", "CONNECT")
        )

    def sink(self) -> tuple[float, float]:
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute(
                "SELECT xact_commit + xact_rollback, sessions FROM pg_stat_database "
                "WHERE datname = current_database()"
            ).fetchone()
        assert row is not None
        return float(row[0]), float(row[1])

    def cpu_seconds(self) -> float:
        """User + system CPU time of the operator process (/proc/PID/stat)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> float:
        """Resident memory of the operator process (/proc/PID/status, VmRSS)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def phases(self) -> dict[str, str | None]:
        out = self.cluster.kubectl("get", "eop", "-n", NAMESPACE, "-o", "json")
        return {
            item["metadata"]["name"]: (item.get("status") or {}).get("phase")
            for item in json.loads(out.stdout)["items"]
        }


def _increases(
    before: dict[tuple[str, tuple[tuple[str, str], ...]], float],
    after: dict[tuple[str, tuple[tuple[str, str], ...]], float],
) -> dict[str, float]:
    """How much each counter grew, summed by name over the series present at both ends: the
    series of a pipeline whose audit was switched off vanish (they are not a fall)."""
    grown: dict[str, float] = defaultdict(float)
    for key, value in after.items():
        if key in before:
            grown[key[0]] += max(0.0, value - before[key])
    return grown


def measure(probe: Probe, window: float) -> dict[str, float]:
    """The window's rates, RSS and freshness samples."""
    started = time.monotonic()
    cpu0, op0, api0 = probe.cpu_seconds(), probe.operator_requests(), probe.apiserver_requests()
    xact0, sess0 = probe.sink()
    audit0 = probe.audit_counters()
    ages: list[float] = []
    while time.monotonic() - started < window:
        ages.extend(probe.ages())
        time.sleep(5)
    elapsed = time.monotonic() - started
    xact1, sess1 = probe.sink()
    moved = _increases(audit0, probe.audit_counters())
    passes = moved["eo_audit_pass_duration_seconds_count"]
    figures = {
        "audit_passes_per_s": passes / elapsed,
        "audit_batches_per_s": moved["eo_audit_batches_total"] / elapsed,
        "audit_pass_s": moved["eo_audit_pass_duration_seconds_sum"] / passes if passes else 0.0,
        "audit_cpu_percent": 100 * moved["eo_audit_cpu_seconds_total"] / elapsed,
        "audit_cpu_ms_per_pass": (
            1000 * moved["eo_audit_cpu_seconds_total"] / passes if passes else 0.0
        ),
        "rss_mib": probe.rss_mib(),
        "cpu_percent": 100 * (probe.cpu_seconds() - cpu0) / elapsed,
        "operator_api_per_s": (probe.operator_requests() - op0) / elapsed,
        "apiserver_api_per_s": (probe.apiserver_requests() - api0) / elapsed,
        "sink_xact_per_s": (xact1 - xact0) / elapsed,
        "sink_sessions_per_s": (sess1 - sess0) / elapsed,
    }
    quantiles = statistics.quantiles(ages, n=20)
    figures |= {
        "fresh_p50_s": statistics.median(ages),
        "fresh_p95_s": quantiles[-1],
        "fresh_max_s": max(ages),
    }
    return figures


def settle(probe: Probe, expected: dict[str, str], timeout: float) -> float:
    """Seconds until every pipeline shows its expected phase."""
    started = time.monotonic()
    while True:
        phases = probe.phases()
        wrong = sum(phases.get(name) != phase for name, phase in expected.items())
        if not wrong:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"{wrong} of {len(expected)} pipelines not in phase")
        print(f"  {wrong} of {len(expected)} pipelines not in their phase yet", flush=True)
        time.sleep(10)


@dataclass(frozen=True)
class AuditLoad:
    """How the continuous audit is exercised: on, off or both per step; its interval; the
    decided batches each pipeline starts with and how often a running one decides another."""

    mode: str = "both"
    interval: int = 60
    seed_batches: int = 5
    feed_every: float = 10.0
    rows: int = 20
    toggle_wait: float = 75.0
    """Seconds after switching the audit on or off before measuring: the edits' own passes,
    and an idle pipeline's next health pass, which drops its audit series."""


def _apply(cluster: Any, docs: list[dict[str, Any]]) -> None:
    for chunk in range(0, len(docs), 100):
        bulk = {"apiVersion": "v1", "kind": "List", "items": docs[chunk : chunk + 100]}
        cluster.kubectl("apply", "-f", "-", input=json.dumps(bulk))


class _Steps:
    """Adds each step's pipelines (seeded, applied, settled, fed) and measures the windows."""

    def __init__(
        self,
        cluster: Any,
        probe: Probe,
        feeder: Feeder,
        work: Path,
        stand_in: Path,
        load: AuditLoad,
        dsn: str,
        running_share: float,
    ) -> None:
        self.cluster, self.probe, self.feeder = cluster, probe, feeder
        self.running_share = running_share
        self.work, self.stand_in, self.load, self.dsn = work, stand_in, load, dsn
        self.expected: dict[str, str] = {}
        self.runs: dict[str, bool] = {}

    def docs(self, audit: bool, names: list[str]) -> list[dict[str, Any]]:
        stand_in = self.stand_in
        interval = self.load.interval
        return [
            manifest(n, self.work, stand_in if self.runs[n] else None, audit, interval)
            for n in names
        ]

    def step(self, step: int, window: float, last: bool, header: bool) -> list[Row]:
        load, share = self.load, self.running_share
        running = sum(self.runs.values())
        target = round(step * share)
        new = [f"p{i:05d}" for i in range(len(self.expected), step)]
        for name in new:
            self.runs[name] = running < target
            running += self.runs[name]
            self.expected[name] = "Running" if self.runs[name] else "Suspended"
        writers = {n: PipelineWriter(f"{NAMESPACE}/{n}", n, self.dsn, load.rows) for n in new}
        print(f"  seeding {len(new)} pipelines with {load.seed_batches} batches", flush=True)
        create_tables(self.dsn, new)
        seed(list(writers.values()), load.seed_batches)
        started = time.monotonic()
        _apply(self.cluster, self.docs(load.mode != "off", new))
        settle(self.probe, self.expected, timeout=max(600.0, step * 1.5))
        settled = round(time.monotonic() - started, 1)
        self.feeder.add(w for n, w in writers.items() if self.runs[n])
        rows: list[Row] = []
        modes = ["on", "off"] if load.mode == "both" else [load.mode]
        for index, mode in enumerate(modes):
            if index:
                _apply(self.cluster, self.docs(mode == "on", list(self.expected)))
                time.sleep(load.toggle_wait)
            figures = measure(self.probe, window)
            load_1m = os.getloadavg()[0]
            row = Row(step, running, settled, load_1m=load_1m, audit=mode, **figures)
            rows.append(row)
            print(table([row], header=header and not rows[:-1]), flush=True)
        if modes[-1] == "off" and not last:
            _apply(self.cluster, self.docs(True, list(self.expected)))
        return rows


def run(
    steps: list[int],
    running_share: float,
    window: float,
    work: Path,
    workers: int,
    load: AuditLoad | None = None,
) -> list[Row]:
    """Grow the pipeline count step by step; one row per step (two with ``--audit both``)."""
    from tests.cluster.plugin import start_cluster
    from tests.operator.cluster_env import installed_operator, lease_args

    load = load or AuditLoad()
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)
    (work / "logs").mkdir(exist_ok=True)
    stand_in = work / "stand-in"
    stand_in.mkdir(exist_ok=True)
    (stand_in / "eo").write_text(STAND_IN)
    (stand_in / "eo").chmod(0o755)
    rows: list[Row] = []
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(temporary_server(settings={"max_connections": "400"}))
        cluster, clients = start_cluster(work / "cluster")
        stack.callback(cluster.control_plane.stop)
        for api in clients:
            stack.enter_context(api)
        stack.callback(cluster.kubelet.stop)
        operator = stack.enter_context(installed_operator(cluster, work / "logs"))
        # The chart's arguments, with a lease that a loaded machine cannot make it lose (a
        # leader that cannot renew exits; its pod would restart, nothing restarts it here).
        operator.stop()
        operator.args = [*lease_args(lease=90, renew=60, retry=5), f"--workers={workers}"]
        operator.start()
        dsn = server.create_database("scale")
        cluster.kubectl("create", "namespace", NAMESPACE)
        cluster.kubectl(
            "create", "secret", "generic", DSN_REF, "-n", NAMESPACE, f"--from-literal=dsn={dsn}"
        )
        probe = Probe(cluster, operator, dsn)
        feeder = Feeder([], load.feed_every)
        feeder.start()
        stack.callback(feeder.stop)
        steps_run = _Steps(cluster, probe, feeder, work, stand_in, load, dsn, running_share)
        for step in steps:
            rows.extend(steps_run.step(step, window, last=step == steps[-1], header=not rows))
        print(f"  feeder: {feeder.batches} batches, {feeder.fenced} fenced", flush=True)
    return rows


def table(rows: list[Row], header: bool = True) -> str:
    """Markdown table rows (with the header when asked)."""
    lines = []
    if header:
        lines += [
            "| pipelines | running | audit | settle s | RSS MiB | CPU % | op API/s | all API/s "
            "| sink xact/s | sink conn/s | fresh p50 s | fresh p95 s | fresh max s "
            "| passes/s | audited/s | pass s | audit CPU % | CPU ms/pass | load 1m |",
            "|" + "---:|" * 19,
        ]
    for r in rows:
        lines.append(
            f"| {r.pipelines} | {r.running} | {r.audit} | {r.settle_s:.0f} | {r.rss_mib:.0f} "
            f"| {r.cpu_percent:.0f} | {r.operator_api_per_s:.1f} | {r.apiserver_api_per_s:.1f} "
            f"| {r.sink_xact_per_s:.1f} | {r.sink_sessions_per_s:.1f} | {r.fresh_p50_s:.1f} "
            f"| {r.fresh_p95_s:.1f} | {r.fresh_max_s:.1f} | {r.audit_passes_per_s:.2f} "
            f"| {r.audit_batches_per_s:.1f} | {r.audit_pass_s:.2f} | {r.audit_cpu_percent:.1f} "
            f"| {r.audit_cpu_ms_per_pass:.0f} | {r.load_1m:.1f} |"
        )
    return "\n".join(lines)


def audit_cost(rows: list[Row], interval: int, default_interval: int = 300) -> str:
    """The audit's cost per step. Measured directly: the CPU of the auditing threads
    (``eo_audit_cpu_seconds_total``), per pass and per audited batch, and what it comes to at
    ``default_interval``; beside it the whole process's CPU and RSS with the audit on and off
    (other work moves them too: spec edits, passes, the machine's load)."""
    lines = [
        "| pipelines | audit CPU % | CPU ms per pass | CPU ms per audited batch "
        f"| audit CPU % at {default_interval} s | process CPU % on / off | RSS MiB on / off |",
        "|" + "---:|" * 7,
    ]
    by_step: dict[int, dict[str, Row]] = {}
    for r in rows:
        by_step.setdefault(r.pipelines, {})[r.audit] = r
    for step, pair in sorted(by_step.items()):
        on, off = pair.get("on"), pair.get("off")
        if on is None:
            continue
        spent = on.audit_cpu_percent / 100  # CPU seconds per second
        per_batch = 1000 * spent / on.audit_batches_per_s if on.audit_batches_per_s else 0.0
        at_default = on.audit_cpu_percent * interval / default_interval
        process = f"{on.cpu_percent:.0f} / " + ("-" if off is None else f"{off.cpu_percent:.0f}")
        rss = f"{on.rss_mib:.0f} / " + ("-" if off is None else f"{off.rss_mib:.0f}")
        lines.append(
            f"| {step} | {on.audit_cpu_percent:.1f} | {on.audit_cpu_ms_per_pass:.0f} "
            f"| {per_batch:.1f} | {at_default:.1f} | {process} | {rss} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    p = argparse.ArgumentParser(prog="python -m bench.operator_scale", description=__doc__)
    p.add_argument("--steps", type=int, nargs="+", default=[100, 500, 1000])
    p.add_argument("--running", type=float, default=0.05, help="share of pipelines with a driver")
    p.add_argument("--window", type=float, default=60.0, help="seconds measured per step")
    p.add_argument(
        "--workers", type=int, default=32, help="eo operator --workers (chart default 32)"
    )
    p.add_argument(
        "--audit",
        choices=["on", "off", "both"],
        default="both",
        help="measure each step with the continuous audit on, off, or both (its cost)",
    )
    p.add_argument("--audit-interval", type=int, default=60, help="spec.audit.intervalSeconds")
    p.add_argument("--seed-batches", type=int, default=5, help="decided batches per pipeline")
    p.add_argument("--feed-every", type=float, default=10.0, help="s between a running one's")
    p.add_argument("--workdir", type=Path, default=None, help="keep files here")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = p.parse_args(argv)
    import tempfile

    work = args.workdir or Path(tempfile.mkdtemp(prefix="eo-scale-"))
    load = AuditLoad(args.audit, args.audit_interval, args.seed_batches, args.feed_every)
    rows = run(sorted(args.steps), args.running, args.window, work, args.workers, load)
    print()
    print(table(rows))
    if args.audit != "off":
        print()
        print(audit_cost(rows, args.audit_interval))
    print(f"\n{os.cpu_count()} cores; load average at the end: {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
