"""Where the tests find promtool and prometheus: the tool cache that the installer fills.

A missing binary is a failure that says how to fix it, never a skip, so CI cannot pass
without running the rule tests.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

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
