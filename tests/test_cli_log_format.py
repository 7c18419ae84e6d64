"""``eo --log-format json|text``: every command logs the way the option says, over $EO_LOG_FORMAT.

Transcripts of the real ``eo`` script in a child process: the driver (``eo run``, up to its
wait for an unreachable sink, which logs before Spark starts) and the operator (``eo
operator`` against an API server that refuses connections, which kopf logs and retries).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.pipelines import LOCAL_YAML

EO = str(Path(sys.executable).with_name("eo"))
UNREACHABLE = "postgresql://eo:pw-secret@127.0.0.1:1/shop?connect_timeout=5"
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|WARNING|ERROR) [\w.]+")

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: down, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: nobody, user: {token: none}}]
contexts: [{name: down, context: {cluster: down, user: nobody}}]
current-context: down
"""


def _env(**extra: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), **extra}


def _run_driver(tmp_path: Path, *options: str, env_format: str | None) -> list[str]:
    spec = tmp_path / "ledger.yaml"
    spec.write_text(LOCAL_YAML)
    env = _env(LEDGER_DSN=UNREACHABLE, EO_SINK_WAIT_SECONDS="1.5")
    if env_format:
        env["EO_LOG_FORMAT"] = env_format
    result = subprocess.run(
        [EO, *options, "run", str(spec), "--epoch", "4", "--metrics-port", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    # The last line is the one-line error, never a log record; the rest are records.
    assert lines[-1].startswith("eo: sink ledger unreachable"), result.stderr
    return lines[:-1]


def test_run_logs_text_when_told_even_if_the_environment_says_json(tmp_path: Path) -> None:
    records = _run_driver(tmp_path, "--log-format", "text", env_format="json")
    assert records, "the driver logged nothing before giving up on the sink"
    for line in records:
        assert TEXT_LINE.match(line), line
        assert " [default/ledger e4]: " in line, line
    assert any("WARNING eo.run [default/ledger e4]: sink ledger unreachable" in r for r in records)


def test_run_logs_json_when_told_even_if_the_environment_says_text(tmp_path: Path) -> None:
    records = [
        json.loads(line)
        for line in _run_driver(tmp_path, "--log-format", "json", env_format="text")
    ]
    warning = next(r for r in records if r["level"] == "WARNING")
    assert warning["logger"] == "eo.run"
    assert (warning["pipeline"], warning["namespace"], warning["epoch"]) == ("ledger", "default", 4)
    assert warning["message"].startswith("sink ledger unreachable")


def test_without_the_option_the_environment_decides(tmp_path: Path) -> None:
    records = _run_driver(tmp_path, env_format="text")
    assert records and all(TEXT_LINE.match(line) for line in records), records


def test_the_option_may_follow_the_command(tmp_path: Path) -> None:
    spec = tmp_path / "ledger.yaml"
    spec.write_text(LOCAL_YAML)
    result = subprocess.run(
        [EO, "run", str(spec), "--epoch", "4", "--metrics-port", "0", "--log-format", "json"],
        capture_output=True,
        text=True,
        env=_env(LEDGER_DSN=UNREACHABLE, EO_SINK_WAIT_SECONDS="1.5", EO_LOG_FORMAT="text"),
        timeout=120,
        check=False,
    )
    first = result.stderr.splitlines()[0]
    assert json.loads(first)["message"].startswith("driver starting"), result.stderr


def _operator_lines(tmp_path: Path, *options: str, env_format: str, count: int) -> list[str]:
    """The operator's first ``count`` stderr lines, then it is stopped (it retries forever)."""
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)
    proc = subprocess.Popen(
        [EO, *options, "--metrics-port", "0", "--liveness-port", "0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=_env(KUBECONFIG=str(config), EO_LOG_FORMAT=env_format),
    )
    lines: list[str] = []
    deadline = time.monotonic() + 120
    try:
        assert proc.stderr is not None
        while len(lines) < count and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert len(lines) == count, lines
    return lines


def test_operator_logs_text_when_told(tmp_path: Path) -> None:
    lines = _operator_lines(
        tmp_path, "operator", "--log-format", "text", env_format="json", count=8
    )
    for line in lines:
        assert TEXT_LINE.match(line), line
    assert any(" kopf." in line for line in lines), lines


def test_operator_logs_json_when_told_before_the_command(tmp_path: Path) -> None:
    lines = _operator_lines(
        tmp_path, "--log-format", "json", "operator", env_format="text", count=8
    )
    records = [json.loads(line) for line in lines]
    # The operator's own CRD check comes first (its API server is unreachable here: the
    # client's retries and eo's warning), then kopf's retries: every line in the format.
    assert any(r["logger"].startswith("kopf") for r in records), records
    assert all({"level", "time", "message"} <= r.keys() for r in records), records


def test_an_unknown_format_in_the_environment_is_one_line_and_a_usage_error(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "ledger.yaml"
    spec.write_text(LOCAL_YAML)
    result = subprocess.run(
        [EO, "validate", "--for", "local", str(spec)],
        capture_output=True,
        text=True,
        env=_env(EO_LOG_FORMAT="xml"),
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == "eo: unknown log format 'xml' (EO_LOG_FORMAT): use one of json, text\n"


@pytest.mark.parametrize("where", ["before", "after"])
def test_an_unknown_format_option_is_refused_by_the_parser(where: str, tmp_path: Path) -> None:
    option = ["--log-format", "xml"]
    argv = [*option, "crd"] if where == "before" else ["crd", *option]
    result = subprocess.run(
        [EO, *argv], capture_output=True, text=True, env=_env(), timeout=60, check=False
    )
    assert result.returncode == 2
    assert "argument --log-format: invalid choice: 'xml' (choose from" in result.stderr
    assert "Traceback" not in result.stderr
