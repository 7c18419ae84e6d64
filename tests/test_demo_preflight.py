"""`eo demo` says what is missing in one line per gap, before it starts anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from eo_jobs.exits import EXIT_MISSING_EXTRA


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


def _demo_with(prelude: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = f"import sys\n{prelude}\nfrom eo_jobs.cli import main\nsys.exit(main(['demo']))"
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


# A module set to None in sys.modules is one Python treats as absent: find_spec says None.
NO_PYSPARK = "sys.modules['pyspark'] = None"


def test_the_demo_without_pyspark_names_the_fix_and_exits_with_the_missing_extra_code() -> None:
    result = _demo_with(NO_PYSPARK, dict(os.environ))
    assert result.returncode == EXIT_MISSING_EXTRA == 7, result.stderr
    lines = result.stderr.strip().splitlines()
    assert (
        "eo demo: pyspark is not installed: run `./dev demo` (or `pip install 'eo[spark]'`)"
        in lines
    )
    java = "eo demo: no Java runtime"
    assert all(line.startswith(java) for line in lines if "pyspark" not in line), lines
    assert "Traceback" not in result.stderr


def test_the_demo_lists_every_gap_at_once_before_starting_anything(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = os.path.dirname(sys.executable)
    env["TMPDIR"] = str(tmp_path)  # the demo's work folder would appear here
    result = _demo_with(NO_PYSPARK, env)
    # A missing extra is what `pip install` fixes, the class every eo command exits 7 for.
    assert result.returncode == EXIT_MISSING_EXTRA, result.stderr
    assert result.stderr.splitlines() == [
        "eo demo: no Java runtime: install Java 17 or newer (e.g. `apt-get install "
        "openjdk-17-jre-headless`) or set JAVA_HOME",
        "eo demo: pyspark is not installed: run `./dev demo` (or `pip install 'eo[spark]'`)",
    ]
    assert list(tmp_path.iterdir()) == []
