"""Where the tests find promtool and prometheus: the tool cache that the installer fills.

A missing binary is a failure that says how to fix it, never a skip, so CI cannot pass
without running the rule tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from eo_jobs.pgserver import free_port

INSTALLER = Path(__file__).resolve().parents[2] / "scripts" / "install-promtool.sh"


def prometheus_version() -> str:
    """The Prometheus version the installer pins, or EO_PROMETHEUS_VERSION when set."""
    pinned = re.search(r"EO_PROMETHEUS_VERSION:-([0-9.]+)\}", INSTALLER.read_text())
    assert pinned, f"{INSTALLER} no longer pins a Prometheus version"
    return os.environ.get("EO_PROMETHEUS_VERSION", pinned.group(1))


def prometheus_binary(name: str) -> Path:
    """``promtool`` or ``prometheus`` of that version, from the tool cache."""
    cache = Path(os.environ.get("EO_CACHE", Path.home() / ".cache" / "eo"))
    binary = cache / "prometheus" / prometheus_version() / "bin" / name
    if not binary.is_file():
        pytest.fail(
            f"{name} {prometheus_version()} is missing at {binary}: run "
            "scripts/install-promtool.sh (or ./dev setup) to build it",
            pytrace=False,
        )
    return binary


@contextlib.contextmanager
def running_prometheus(target_port: int, work: Path) -> Iterator[str]:
    """Prometheus with the shipped rules, scraping ``127.0.0.1:target_port`` every second."""
    rules = INSTALLER.parents[1] / "monitoring" / "prometheus" / "eo-alerts.rules.yaml"
    config = work / "prometheus.yml"
    config.write_text(
        json.dumps(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(rules)],
                "scrape_configs": [
                    {
                        "job_name": "eo-operator",
                        "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}],
                    }
                ],
            }
        )
    )
    address = f"127.0.0.1:{free_port()}"
    with (work / "prometheus.log").open("w") as log:
        process = subprocess.Popen(
            [
                str(prometheus_binary("prometheus")),
                f"--config.file={config}",
                f"--storage.tsdb.path={work / 'tsdb'}",
                f"--web.listen-address={address}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield f"http://{address}"
        finally:
            process.terminate()
            process.wait(30)
