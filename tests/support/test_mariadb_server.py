"""The MariaDB the MySQL sink's tests use is set up by the project's own script, without root,
and runs as whoever runs the tests: CI is root, a developer is not."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.mariadb import MariaDbInstall, MariaDbServer, MariaDbSetupError, find_install

ROOT = Path(__file__).resolve().parents[2]
AS_USER = "nobody" if os.geteuid() == 0 else None
"""Under root the non-root case is played by ``nobody``; otherwise the caller is that case."""


def _run_script(script: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script)],
        env={"PATH": os.environ["PATH"], "HOME": str(cache.parent), "EO_CACHE": str(cache)},
        user=AS_USER,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def unprivileged_copy() -> Iterator[tuple[Path, subprocess.CompletedProcess[str]]]:
    """A folder ``AS_USER`` owns, holding a copy of the scripts (the clone may sit in root's
    0700 home) and the tool cache the install script filled, run there as ``AS_USER``."""
    folder = Path(tempfile.mkdtemp(prefix="eo-mariadb-user-"))
    folder.chmod(0o755)
    shutil.copytree(ROOT / "scripts", folder / "scripts")
    if AS_USER is not None:
        entry = pwd.getpwnam(AS_USER)
        for path in [folder, *folder.rglob("*")]:
            os.chown(path, entry.pw_uid, entry.pw_gid)
    try:
        yield folder, _run_script(folder / "scripts" / "install-mariadb.sh", folder / "cache")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_user_who_is_not_root_installs_it_once_and_a_second_run_does_nothing(
    unprivileged_copy: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    folder, first = unprivileged_copy
    script = folder / "scripts" / "install-mariadb.sh"
    cache = folder / "cache"
    assert first.returncode == 0, first.stderr + first.stdout
    assert "downloading mariadb-server-core mariadb-client-core" in first.stdout
    assert "apt-get download: done in" in first.stderr
    (installed,) = (cache / "mariadb").glob("*/.complete")
    assert installed.parent.name.startswith("10.11."), installed
    assert not list((cache / "mariadb").glob(".*partial*"))

    started = time.monotonic()
    second = _run_script(script, cache)
    assert second.returncode == 0, second.stderr
    assert second.stdout == f"install-mariadb: {installed.parent.name} in {installed.parent}\n"
    assert second.stderr == ""
    assert time.monotonic() - started < 10


def test_a_user_who_is_not_root_runs_the_server_and_restarts_it_on_its_data(
    unprivileged_copy: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    folder, install = unprivileged_copy
    assert install.returncode == 0, install.stderr
    (installed,) = (folder / "cache" / "mariadb").glob("*/.complete")
    workdir = folder / "server"
    workdir.mkdir()
    server = MariaDbServer(MariaDbInstall(installed.parent / "root"), workdir, user=AS_USER)
    try:
        server.start()
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT CURRENT_USER(), USER() LIKE 'root@%'")
            assert cur.fetchone() == ("root@127.0.0.1", 1)
            cur.execute("CREATE DATABASE kept")
            cur.execute("CREATE TABLE kept.t (id INT PRIMARY KEY) ENGINE=InnoDB")
            cur.execute("INSERT INTO kept.t VALUES (1)")
        pid = int((workdir / "mysqld.pid").read_text())
        owner = Path(f"/proc/{pid}").stat().st_uid
        assert owner == (os.geteuid() if AS_USER is None else pwd.getpwnam(AS_USER).pw_uid)
        server.restart(crash=True)
        with server.connect("kept") as conn, conn.cursor() as cur:
            cur.execute("SELECT id FROM t")
            assert cur.fetchall() == ((1,),)
    finally:
        server.remove()


def test_a_missing_installation_names_the_script_that_installs_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("EO_CACHE", str(tmp_path))
    monkeypatch.delenv("EO_MARIADB_HOME", raising=False)
    with pytest.raises(MariaDbSetupError, match=r"run `\./dev setup` or `scripts/install"):
        find_install()
