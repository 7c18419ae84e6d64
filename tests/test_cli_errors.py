"""Ordinary mistakes get one line saying what is wrong and what to do, and an exit code per class.

No traceback unless ``--debug`` asks for it. The exit codes are the ones ``eo --help`` lists.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from eo_jobs import cli
from eo_jobs.cli import main
from tests.support.pipelines import LOCAL_YAML

UNREACHABLE = "postgresql://eo:pw-secret@127.0.0.1:1/shop?connect_timeout=5"


def _eo(
    *args: str, env: dict[str, str] | None = None, stdin: bytes | None = None, prelude: str = ""
) -> subprocess.CompletedProcess[str]:
    """``eo ARGS`` in a child process; ``prelude`` runs first (to hide an installed extra)."""
    code = f"import sys\n{prelude}\nfrom eo_jobs.cli import main\nsys.exit(main(sys.argv[1:]))"
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        check=False,
        input=stdin,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
        timeout=120,
    )
    return subprocess.CompletedProcess(
        result.args, result.returncode, result.stdout.decode(), result.stderr.decode()
    )


HIDE = """
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == {module!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Hide())
"""


def _one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.yaml"
    path.write_text(LOCAL_YAML)
    return path


def test_a_missing_file_is_named_with_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["validate", str(missing)]) == cli.EXIT_NO_INPUT
    line = _one_line(capsys.readouterr().err)
    assert str(missing) in line and "no such file" in line and "check the path" in line


def test_a_directory_given_as_the_file_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["recover", str(tmp_path), "--epoch", "2"]) == cli.EXIT_NO_INPUT
    line = _one_line(capsys.readouterr().err)
    assert "is a directory" in line and "pipeline YAML file" in line


def test_an_unreadable_file_says_permission_denied(
    spec: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(_path: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(spec))

    # The tests run as root, which chmod cannot lock out; refuse the read itself instead.
    monkeypatch.setattr(Path, "read_bytes", refuse)
    assert main(["validate", str(spec)]) == cli.EXIT_NO_INPUT
    line = _one_line(capsys.readouterr().err)
    assert "permission denied" in line and "permissions" in line


def test_a_file_that_is_not_utf8_says_so_with_the_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"kind: \xff\xfe\x00ExactlyOncePipeline\n")
    assert main(["validate", str(binary)]) == cli.EXIT_NO_INPUT
    line = _one_line(capsys.readouterr().err)
    assert "not UTF-8" in line and "byte 6" in line and "save it as UTF-8" in line


def test_dash_reads_the_manifest_from_standard_input() -> None:
    ok = _eo("validate", "--for", "local", "-", stdin=LOCAL_YAML.encode())
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("OK <stdin>: default/ledger")


def test_validate_checks_every_file_even_after_one_is_missing(
    tmp_path: Path, spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(LOCAL_YAML.replace("format: json", "format: xml"))
    code = main(["validate", "--for", "local", str(spec), str(tmp_path / "nope.yaml"), str(bad)])
    out, err = capsys.readouterr()
    assert code == cli.EXIT_NO_INPUT, "the first failure's class"
    assert out.startswith(f"OK {spec}")
    assert "no such file" in err and "spec.source.files.format" in err
    assert "Traceback" not in err


def test_an_invalid_pipeline_has_its_own_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(LOCAL_YAML.replace("format: json", "format: xml"))
    assert main(["sweep", str(bad)]) == cli.EXIT_INVALID
    assert "spec.source.files.format" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["sweep"], ["recover", "--epoch", "2"], ["audit"]])
def test_an_unreachable_database_is_one_line_naming_the_variable(
    spec: Path, command: list[str]
) -> None:
    result = _eo(command[0], str(spec), *command[1:], env={"LEDGER_DSN": UNREACHABLE})
    assert result.returncode == cli.EXIT_DATABASE
    line = _one_line(result.stderr)
    assert "cannot connect" in line and "Connection refused" in line
    assert "sink 'ledger'" in line and "LEDGER_DSN" in line and "pw-secret" not in line


def test_a_dsn_that_is_not_a_connection_string_is_named_without_its_value(
    spec: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEDGER_DSN", "not a dsn secretpw")
    assert main(["sweep", str(spec)]) == cli.EXIT_DATABASE
    line = _one_line(capsys.readouterr().err)
    assert "LEDGER_DSN" in line and "postgresql://" in line and "secretpw" not in line


def test_missing_privileges_say_which_and_point_at_eo_audit(
    pg_dsn: str, spec: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS eo_reader")
        conn.execute("CREATE ROLE eo_reader LOGIN")  # CONNECT only: no CREATE for schema eo
    limited = psycopg.conninfo.make_conninfo(pg_dsn, user="eo_reader")
    monkeypatch.setenv("LEDGER_DSN", limited)
    assert main(["recover", str(spec), "--epoch", "1"]) == cli.EXIT_PRIVILEGE
    line = _one_line(capsys.readouterr().err)
    assert "permission denied" in line and "eo_reader" in line and "eo audit" in line


@pytest.mark.parametrize("epoch", ["-1", "0", "x"])
@pytest.mark.parametrize("command", ["recover", "run"])
def test_a_non_positive_epoch_is_a_usage_error(
    spec: Path, command: str, epoch: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, str(spec), "--epoch", epoch])
    assert exited.value.code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "--epoch" in err and "positive integer" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "module", "extra"),
    [
        (["run", "{spec}", "--epoch", "1"], "pyspark", "spark"),
        (["operator"], "kopf", "operator"),
    ],
)
def test_a_missing_extra_names_the_install_command(
    spec: Path, args: list[str], module: str, extra: str
) -> None:
    argv = [a.replace("{spec}", str(spec)) for a in args]
    result = _eo(*argv, prelude=HIDE.format(module=module))
    assert result.returncode == cli.EXIT_MISSING_EXTRA
    line = _one_line(result.stderr)
    assert f"eo {argv[0]} needs the {extra} extra" in line and f"[{extra}]" in line


def test_debug_shows_the_traceback_and_keeps_the_exit_code(tmp_path: Path) -> None:
    plain = _eo("validate", str(tmp_path / "nope.yaml"))
    debug = _eo("validate", str(tmp_path / "nope.yaml"), "--debug")
    before = _eo("--debug", "validate", str(tmp_path / "nope.yaml"))
    assert "Traceback" not in plain.stderr
    for result in (debug, before):
        assert result.returncode == cli.EXIT_NO_INPUT == plain.returncode
        assert "Traceback" in result.stderr and "FileNotFoundError" in result.stderr
        assert result.stderr.strip().splitlines()[-1] == plain.stderr.strip()


def test_a_fence_regression_is_one_line_with_the_epoch_to_use(
    pg_dsn: str, spec: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEDGER_DSN", pg_dsn)
    assert main(["recover", str(spec), "--epoch", "5"]) == 0
    capsys.readouterr()
    assert main(["recover", str(spec), "--epoch", "3"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "refusing to lower the fence" in line and "use an epoch >= 5" in line


def test_a_missing_dsn_variable_is_a_usage_error(
    spec: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LEDGER_DSN", raising=False)
    assert main(["sweep", str(spec)]) == cli.EXIT_USAGE
    assert "set environment variable LEDGER_DSN" in _one_line(capsys.readouterr().err)


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"eo {version('eo')}"


def test_help_lists_every_exit_code_with_its_meaning() -> None:
    text = cli.parser().format_help()
    for code in (
        cli.EXIT_USAGE,
        cli.EXIT_INVALID,
        cli.EXIT_NO_INPUT,
        cli.EXIT_DATABASE,
        cli.EXIT_PRIVILEGE,
        cli.EXIT_MISSING_EXTRA,
        75,
        76,
        77,
    ):
        assert f"\n  {code:<3} " in text, code
    assert len({cli.EXIT_INVALID, cli.EXIT_NO_INPUT, cli.EXIT_DATABASE}) == 3


def test_every_subcommand_has_a_description_and_shows_its_defaults() -> None:
    top = cli.parser()
    commands = next(a for a in top._actions if a.dest == "command").choices
    assert commands
    for name, sub in commands.items():
        assert sub.description, f"eo {name} has no description"
        text = sub.format_help()
        assert "--debug" in text
    assert "(default: 9090)" in commands["operator"].format_help()
    assert "(default: 200000)" in commands["demo"].format_help()
    assert "EO_SINK_<NAME>_DSN" in commands["sweep"].format_help()
    assert "query-started" in commands["forget-query"].format_help()


def test_ctrl_c_is_one_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(_args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_crd", interrupted)
    assert main(["crd"]) == 130
    assert _one_line(capsys.readouterr().err) == "eo: interrupted"
