"""Every Spark driver a bench test starts (eo's and the baselines') gets the test JVM options:
the bench reads ``EO_SPARK_DRIVER_JAVA_OPTIONS`` through eo's own Spark settings. These tests
check what the bench measures and audits, never how fast (``bench.fast_jvm`` says why)."""

from __future__ import annotations

import pytest

from bench import fast_jvm


@pytest.fixture(autouse=True)
def _fast_drivers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EO_SPARK_DRIVER_JAVA_OPTIONS", fast_jvm.java_options())
