"""The long setup steps show a sign of life: scripts/lib/progress.sh's ``with_progress``, which
the Go builds (cluster tools, promtool) and the Maven resolution of the jars run under.

Real bash, real child processes, and a real (tiny) ``go build -v``: the count a heartbeat line
shows is the packages the build compiled so far.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "scripts" / "lib" / "progress.sh"
GO = shutil.which("go") or "/usr/local/go/bin/go"


def _bash(script: str, cwd: Path, every: int = 1, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail\nsource {LIB}\n{script}"],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={"PATH": f"{Path(GO).parent}:/usr/bin:/bin", "EO_PROGRESS_SECONDS": str(every), **env},
        timeout=600,
        check=False,
    )


def test_a_long_step_prints_a_line_while_it_runs_and_when_it_is_done(tmp_path: Path) -> None:
    result = _bash(
        "with_progress 'resolving' 'lines' bash -c 'for i in 1 2 3 4; do echo $i; sleep 1; done'",
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == "resolving: started (a line every 1s)"
    beats = [line for line in lines[1:-1] if re.fullmatch(r"resolving: \d+s, \d+ lines", line)]
    assert len(beats) >= 2, lines
    counts = [int(line.split(", ")[1].split()[0]) for line in beats]
    assert counts == sorted(counts) and counts[-1] >= 2, lines
    assert re.fullmatch(r"resolving: done in \d+s", lines[-1]), lines
    assert result.stdout == "", "the command's own output belongs in its log"


def test_a_failed_step_says_so_shows_its_last_lines_and_keeps_its_exit_status(
    tmp_path: Path,
) -> None:
    result = _bash(
        "status=0; with_progress 'building x' '' bash -c 'echo compiling; echo boom >&2; exit 3'"
        ' || status=$?; echo "status=$status"',
        tmp_path,
        every=30,
    )
    assert result.stdout == "status=3\n"
    lines = result.stderr.splitlines()
    assert re.fullmatch(r"building x: failed \(exit 3\) after \d+s", lines[1]), lines
    assert lines[2:] == ["compiling", "boom"]


def test_a_caller_that_reads_the_log_itself_gets_it_kept_and_unprinted(tmp_path: Path) -> None:
    log = tmp_path / "maven.log"
    result = _bash(
        f"progress_log={log}; with_progress 'maven' '' bash -c 'echo missing jar; exit 1' || true",
        tmp_path,
        every=30,
    )
    assert log.read_text() == "missing jar\n"
    assert "missing jar" not in result.stderr


@pytest.mark.skipif(not Path(GO).exists(), reason="Go is not installed (scripts need it too)")
def test_a_go_build_counts_the_packages_it_compiles(tmp_path: Path) -> None:
    module = tmp_path / "mod"
    for package in ("a", "b"):
        (module / package).mkdir(parents=True)
        (module / package / f"{package}.go").write_text(
            f"package {package}\n\nfunc Name() string {{ return {package!r} }}\n".replace("'", '"')
        )
    (module / "go.mod").write_text("module eo.test/progress\n\ngo 1.21\n")
    (module / "main.go").write_text(
        'package main\n\nimport (\n\t"fmt"\n\t"eo.test/progress/a"\n\t"eo.test/progress/b"\n)\n\n'
        "func main() { fmt.Println(a.Name(), b.Name()) }\n"
    )
    result = _bash(
        "with_progress 'building tool' 'packages compiled' go build -v -o tool .",
        module,
        GOCACHE=str(tmp_path / "gocache"),
        GOPATH=str(tmp_path / "gopath"),
        GOTOOLCHAIN="local",
        GOFLAGS="-mod=mod",
        HOME=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    assert (module / "tool").exists()
    assert result.stderr.splitlines()[0] == "building tool: started (a line every 1s)"
    assert re.fullmatch(r"building tool: done in \d+s", result.stderr.splitlines()[-1])


@pytest.mark.parametrize(
    "script",
    ["build-cluster-tools.sh", "install-promtool.sh", "fetch-jars.sh", "install-mariadb.sh"],
)
def test_the_long_setup_scripts_run_their_slow_commands_under_with_progress(script: str) -> None:
    text = (ROOT / "scripts" / script).read_text()
    assert 'lib/progress.sh"' in text
    slow = {
        "build-cluster-tools.sh": ["go build -v"],
        "install-promtool.sh": ["go mod tidy", "go build -v", "go mod download"],
        "fetch-jars.sh": ['"${MVN[@]}" -f'],
        "install-mariadb.sh": [
            'apt-get "${apt_opts[@]}" update',
            'apt-get "${apt_opts[@]}" download "${PACKAGES[@]}"',
            'apt-get "${apt_opts[@]}" download "${needed[@]}"',
        ],
    }[script]
    for command in slow:
        # The command is an argument of with_progress (possibly on a continuation line).
        found = re.search(r"with_progress [^\n]*(\\\n[^\n]*)*?" + re.escape(command), text)
        assert found, f"{script}: {command} does not run under with_progress"


def test_setup_runs_every_install_script_so_dev_test_gets_each_tool() -> None:
    text = (ROOT / "scripts" / "setup.sh").read_text()
    scripts = sorted((ROOT / "scripts").glob("install-*.sh"))
    assert scripts
    for script in scripts:
        assert f"scripts/{script.name}" in text, f"setup.sh does not run {script.name}"


def test_setup_shows_pips_download_progress() -> None:
    text = (ROOT / "scripts" / "setup.sh").read_text()
    installs = re.findall(r'"\$\{PIP\[@\]\}" (-[^\n]*)', text)
    assert installs, "setup.sh installs through ${PIP[@]}"
    assert "--progress-bar on" in text
    for args in installs:
        if "-e " in args:  # the installs that download PySpark: never quiet
            assert "-q" not in args.split(), args


def test_the_job_image_copies_the_library_fetch_jars_sources() -> None:
    """The job image runs fetch-jars.sh in its build: what it sources must be in the image."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (scripts/\S+) ", dockerfile, re.M))
    assert "scripts/fetch-jars.sh" in copied
    sourced = re.findall(
        r'^source "\$ROOT/(scripts/\S+)"', (ROOT / "scripts/fetch-jars.sh").read_text(), re.M
    )
    assert sourced, "fetch-jars.sh sources scripts/lib/progress.sh"
    for path in sourced:
        assert path in copied, f"Dockerfile: {path} is sourced by fetch-jars.sh but not copied"
        assert f"!{path}" in (ROOT / ".dockerignore").read_text().splitlines()
