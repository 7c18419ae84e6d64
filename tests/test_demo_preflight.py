"""`eo demo` says what is missing in one line per gap, before it starts anything."""

from __future__ import annotations

import os
import subprocess
import sys


def test_the_demo_without_java_names_the_fix_and_exits_2() -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = os.path.dirname(sys.executable)  # the venv's tools, no java
    result = subprocess.run(
        [sys.executable, "-m", "eo_jobs.cli", "demo"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        "eo demo: no Java runtime: install Java 17 or newer (e.g. `apt-get install "
        "openjdk-17-jre-headless`) or set JAVA_HOME"
    )
    assert "Traceback" not in result.stderr
