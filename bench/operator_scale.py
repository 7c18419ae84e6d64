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
- **settle s**: from applying the step's new pipelines to all of them in their phase.

Usage: ``python -m bench.operator_scale [--steps 100 500 1000] [--window 60]``. It needs the
cluster tools and PostgreSQL from ``./dev setup``, and prints a Markdown table with the
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg
from prometheus_client.parser import text_string_to_metric_families

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


def manifest(name: str, work: Path, stand_in: Path | None) -> dict[str, Any]:
    """A pipeline: suspended, or running the stand-in driver."""
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
                    "table": "public.orders",
                },
            }
        ],
        "checkpoint": {"location": str(work / "checkpoints" / name)},
        "driver": {"cores": 1, "memory": "512m"},
        "suspend": stand_in is None,
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


def measure(probe: Probe, window: float) -> dict[str, float]:
    """The window's rates, RSS and freshness samples."""
    started = time.monotonic()
    cpu0, op0, api0 = probe.cpu_seconds(), probe.operator_requests(), probe.apiserver_requests()
    xact0, sess0 = probe.sink()
    ages: list[float] = []
    while time.monotonic() - started < window:
        ages.extend(probe.ages())
        time.sleep(5)
    elapsed = time.monotonic() - started
    xact1, sess1 = probe.sink()
    figures = {
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


def run(
    steps: list[int], running_share: float, window: float, work: Path, workers: int
) -> list[Row]:
    """Grow the pipeline count step by step; one row per step."""
    from tests.cluster.plugin import start_cluster
    from tests.operator.cluster_env import installed_operator, lease_args

    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)
    (work / "logs").mkdir(exist_ok=True)
    stand_in = work / "stand-in"
    stand_in.mkdir(exist_ok=True)
    (stand_in / "eo").write_text(STAND_IN)
    (stand_in / "eo").chmod(0o755)
    rows: list[Row] = []
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(temporary_server(settings={"max_connections": "200"}))
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
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE public.orders (order_id bigint PRIMARY KEY, merchant text, "
                "amount_cents bigint)"
            )
        cluster.kubectl("create", "namespace", NAMESPACE)
        cluster.kubectl(
            "create", "secret", "generic", DSN_REF, "-n", NAMESPACE, f"--from-literal=dsn={dsn}"
        )
        probe = Probe(cluster, operator, dsn)
        expected: dict[str, str] = {}
        for step in steps:
            running_target = round(step * running_share)
            running = sum(phase == "Running" for phase in expected.values())
            docs = []
            for i in range(len(expected), step):
                name = f"p{i:05d}"
                run_it = running < running_target
                running += run_it
                docs.append(manifest(name, work, stand_in if run_it else None))
                expected[name] = "Running" if run_it else "Suspended"
            started = time.monotonic()
            for chunk in range(0, len(docs), 100):
                bulk = {"apiVersion": "v1", "kind": "List", "items": docs[chunk : chunk + 100]}
                cluster.kubectl("apply", "-f", "-", input=json.dumps(bulk))
            settle(probe, expected, timeout=max(600.0, step * 1.5))
            settled = time.monotonic() - started
            figures = measure(probe, window)
            row = Row(step, running, round(settled, 1), load_1m=os.getloadavg()[0], **figures)
            rows.append(row)
            print(table([row], header=not rows[:-1]), flush=True)
    return rows


def table(rows: list[Row], header: bool = True) -> str:
    """Markdown table rows (with the header when asked)."""
    lines = []
    if header:
        lines += [
            "| pipelines | running | settle s | RSS MiB | CPU % | op API/s | all API/s "
            "| sink xact/s | sink conn/s | fresh p50 s | fresh p95 s | fresh max s | load 1m |",
            "|" + "---:|" * 13,
        ]
    for r in rows:
        lines.append(
            f"| {r.pipelines} | {r.running} | {r.settle_s:.0f} | {r.rss_mib:.0f} "
            f"| {r.cpu_percent:.0f} | {r.operator_api_per_s:.1f} | {r.apiserver_api_per_s:.1f} "
            f"| {r.sink_xact_per_s:.1f} | {r.sink_sessions_per_s:.1f} | {r.fresh_p50_s:.1f} "
            f"| {r.fresh_p95_s:.1f} | {r.fresh_max_s:.1f} | {r.load_1m:.1f} |"
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
    p.add_argument("--workdir", type=Path, default=None, help="keep files here")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = p.parse_args(argv)
    import tempfile

    work = args.workdir or Path(tempfile.mkdtemp(prefix="eo-scale-"))
    rows = run(sorted(args.steps), args.running, args.window, work, args.workers)
    print()
    print(table(rows))
    print(f"\n{os.cpu_count()} cores; load average at the end: {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
