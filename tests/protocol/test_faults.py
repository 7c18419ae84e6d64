"""The fault switch: variables for a whole run, or a file a chaos run arms while a driver runs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from eo_jobs.protocol.faults import InjectedFaultError, crash_point


def _arm(path: Path, **fault: object) -> None:
    path.write_text(json.dumps(fault))


def test_a_fault_file_arms_and_disarms_a_running_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fault = tmp_path / "fault.json"
    monkeypatch.setenv("EO_FAULT_FILE", str(fault))
    monkeypatch.setenv("EO_FAULT_POINT", "before-decision")  # ignored: the file rules

    crash_point("before-decision", 3)  # no file yet: nothing happens
    _arm(fault, point="before-decision", batch=4, action="raise")
    crash_point("before-decision", 3)  # another batch
    crash_point("after-decision", 4)  # another point
    with pytest.raises(InjectedFaultError):
        crash_point("before-decision", 4)
    crash_point("before-decision", 4, first_attempt=False)  # a retry gets through
    fault.unlink()
    crash_point("before-decision", 4)


def test_a_fault_file_that_is_half_written_arms_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fault = tmp_path / "fault.json"
    fault.write_text('{"point": "before-deci')
    monkeypatch.setenv("EO_FAULT_FILE", str(fault))

    crash_point("before-decision", 1)


def test_a_kill_armed_by_file_is_a_real_sigkill(tmp_path: Path) -> None:
    fault = tmp_path / "fault.json"
    _arm(fault, point="after-commits")
    code = (
        "from eo_jobs.protocol.faults import crash_point\n"
        "crash_point('after-commits', 7)\n"
        "print('survived')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={"EO_FAULT_FILE": str(fault), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert "survived" not in result.stdout
