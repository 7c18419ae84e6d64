"""The JUnit tests of the JVM writer's Maven module (jvm/writer), run by Maven under pytest.

``scripts/build-writer.sh --test DIR`` runs ``mvn test`` offline (the plugins, ECJ and JUnit are
in ~/.m2 since ``./dev setup`` built the jar) against the jars PySpark ships and pgJDBC, building
in DIR; its surefire reports say what ran. The behaviour that needs a real PostgreSQL is tested
from Python (tests/runtime/test_jvm_writer.py).
"""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.xdist_group("jvm-maven")


def test_the_writer_modules_junit_tests_all_pass(tmp_path: Path) -> None:
    run = subprocess.run(
        [str(ROOT / "scripts" / "build-writer.sh"), "--test", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-5000:]
    reports = sorted((tmp_path / "target" / "surefire-reports").glob("TEST-*.xml"))
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    suites = set()
    for report in reports:
        suite = ET.parse(report).getroot()
        suites.add(suite.get("name"))
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
    assert totals["tests"] > 0, run.stdout[-5000:]
    assert totals["failures"] == totals["errors"] == totals["skipped"] == 0, totals
    # Every test class of the module ran: none was left out by a pattern or a compile problem.
    sources = (ROOT / "jvm" / "writer" / "src" / "test" / "java").rglob("*Test.java")
    expected = {
        ".".join(path.relative_to(ROOT / "jvm/writer/src/test/java").with_suffix("").parts)
        for path in sources
    }
    assert suites == expected
