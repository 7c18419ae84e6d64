"""A running `eo run` serves the Spark UI by default, says where, and keeps it read-only."""

from __future__ import annotations

import json
import re
import signal
import time
import urllib.request
from pathlib import Path

import pytest
from tests.runtime import harness

pytestmark = [pytest.mark.spark]


def test_a_streaming_driver_logs_its_spark_ui_which_shows_the_query_read_only(
    pg_dsn: str, tmp_path: Path
) -> None:
    harness.create_table(pg_dsn)
    harness.write_files(tmp_path / "in", files=2, per_file=20)
    spec = harness.files_pipeline(tmp_path)
    driver = harness.Driver(spec, 1, pg_dsn, available_now=False)
    try:
        deadline = time.monotonic() + 240
        while not (found := re.search(r"Spark UI at (http://\S+)", driver.output())):
            assert driver.proc.poll() is None and time.monotonic() < deadline, driver.output()
            time.sleep(0.5)
        url = found.group(1)
        # 4040 unless another Spark on this machine holds it (a pod has it to itself).
        assert re.fullmatch(r"http://127\.0\.0\.1:40[4-5]\d", url), url
        while driver.batches_done() < 1:
            assert driver.proc.poll() is None and time.monotonic() < deadline, driver.output()
            time.sleep(0.5)

        with urllib.request.urlopen(f"{url}/api/v1/applications", timeout=10) as response:
            apps = json.loads(response.read())
        assert [app["name"] for app in apps] == ["eo-test-orders"]
        with urllib.request.urlopen(f"{url}/StreamingQuery/", timeout=10) as page:
            assert "orders" in page.read().decode()
        # No killing a batch's job from a browser: the UI has no authentication.
        environment = f"{url}/api/v1/applications/{apps[0]['id']}/environment"
        with urllib.request.urlopen(environment, timeout=10) as response:
            properties = dict(json.loads(response.read())["sparkProperties"])
        assert properties["spark.ui.killEnabled"] == "false"
    finally:
        driver.kill(signal.SIGTERM)
        driver.wait(120)
