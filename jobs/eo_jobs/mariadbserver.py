"""A throwaway MariaDB server in a folder: Debian's ``mariadbd``, unpacked into the tool cache by
``scripts/install-mariadb.sh`` (run by ``./dev setup``), started as a child process on loopback.

It plays for MySQL sinks the part :mod:`eo_jobs.pgserver` plays for PostgreSQL: the test suite's
fixtures (``tests/support/mariadb.py``) and the bench (``bench/compare.py``'s MySQL variants)
both start their servers through it, so the bench need not import the tests. ``mariadbd``
refuses to run as root unless told ``--user=root``; it is told so under root, and runs as the
caller otherwise (or as ``user``), so the same code serves CI (root) and a developer (not root).
"""

from __future__ import annotations

import ctypes
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import pymysql

from eo_jobs.pgserver import free_port
from eo_jobs.runtime.packages import eo_cache

if TYPE_CHECKING:
    Connection: TypeAlias = pymysql.connections.Connection[pymysql.cursors.Cursor]

_PR_SET_PDEATHSIG = 1
_prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
"""Resolved here, in the parent, so the forked child only makes one plain libc call (Linux)."""


def die_with_parent() -> None:
    """Have Linux SIGTERM the server (a ``preexec_fn``) when the process that started it dies.

    A test run or a bench killed outright would otherwise leave ``mariadbd`` running on a shared
    machine.
    """
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


INSTALL_SCRIPT = "scripts/install-mariadb.sh"
HOME_ENV = "EO_MARIADB_HOME"
"""Names an unpacked installation (a folder holding ``usr/sbin/mariadbd``) instead of the cache."""

DEFAULT_SETTINGS: Mapping[str, str | None] = {
    "server-id": "1",
    "log-bin": "binlog",
    "binlog-format": "ROW",
    "max-connections": "200",
    "innodb-buffer-pool-size": "64M",
    "innodb-lock-wait-timeout": "10",
    "sync-binlog": "1",
    "innodb-flush-log-at-trx-commit": "1",
}
"""The binary log is on, as on a replicated production server: XA prepare and commit are then
written to it, the case the sink must survive. Both logs are flushed at every commit, as the
sink contract requires (``sinks.mysql.contract``). ``None`` as a value means a bare flag."""


class MariaDbSetupError(RuntimeError):
    """No installation found, or the server did not start; the message says what to do."""


@dataclass(frozen=True)
class MariaDbInstall:
    """An unpacked MariaDB: ``<root>/usr/sbin/mariadbd`` and friends, libraries beside them."""

    root: Path

    @property
    def usr(self) -> Path:
        """The ``--basedir`` (share/mysql holds the system tables' SQL and the messages)."""
        return self.root / "usr"

    def env(self) -> dict[str, str]:
        """The environment its binaries run in: the unpacked libraries come first."""
        listed = self.root.parent / "libdirs"
        if listed.exists():
            folders = [self.root.parent / line for line in listed.read_text().split()]
        else:  # an EO_MARIADB_HOME without the script's list
            folders = sorted({p.parent for p in self.root.glob("usr/lib/*/lib*.so*")})
        old = os.environ.get("LD_LIBRARY_PATH")
        path = ":".join([*map(str, folders), *([old] if old else [])])
        return {**os.environ, "LD_LIBRARY_PATH": path, "LC_ALL": "C"}


def find_install() -> MariaDbInstall:
    """``$EO_MARIADB_HOME``, else the latest installed complete installation of the cache."""
    override = os.environ.get(HOME_ENV)
    if override:
        return MariaDbInstall(Path(override))
    found = sorted((eo_cache() / "mariadb").glob("*/.complete"))
    if not found:
        raise MariaDbSetupError(
            f"no MariaDB server in {eo_cache() / 'mariadb'}: run `./dev setup` or "
            f"`{INSTALL_SCRIPT}` (or set {HOME_ENV} to an unpacked installation)"
        )
    newest = max(found, key=lambda stamp: stamp.stat().st_mtime)  # "10.11.9" > "10.11.19"
    return MariaDbInstall(newest.parent / "root")


class MariaDbServer:
    """One ``mariadbd`` on 127.0.0.1 owning ``workdir/data``.

    ``user`` (for a caller that is root) runs the server and its set-up as that user, the way a
    developer who is not root runs them.
    """

    def __init__(
        self,
        install: MariaDbInstall,
        workdir: Path,
        settings: Mapping[str, str | None] = DEFAULT_SETTINGS,
        user: str | None = None,
    ) -> None:
        self.install = install
        self.workdir = workdir
        self.datadir = workdir / "data"
        self.log_path = workdir / "error.log"
        self.settings = dict(settings)
        self.port = free_port()
        self.user = user
        self._process: subprocess.Popen[bytes] | None = None

    def _server_user(self) -> list[str]:
        """``--user=root`` when the server would run as root (mariadbd refuses root without
        it); nothing when it runs as the caller or as ``self.user``."""
        return ["--user=root"] if os.geteuid() == 0 and self.user is None else []

    def _chown(self, path: Path) -> None:
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def init(self) -> None:
        """Create the system tables (once): root@localhost and root@127.0.0.1 with no password
        (``--auth-root-authentication-method=normal``), no test database."""
        if (self.datadir / "mysql").is_dir():
            return
        self.datadir.mkdir(parents=True, exist_ok=True)
        self._chown(self.workdir)
        self._chown(self.datadir)
        result = subprocess.run(
            [
                str(self.install.usr / "bin" / "mariadb-install-db"),
                "--no-defaults",
                f"--basedir={self.install.usr}",
                f"--datadir={self.datadir}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
                *self._server_user(),
            ],
            env=self.install.env(),
            capture_output=True,
            text=True,
            check=False,
            user=self.user,
        )
        if result.returncode != 0:
            raise MariaDbSetupError(
                f"mariadb-install-db failed in {self.datadir}:\n{result.stdout}{result.stderr}"
            )

    def command(self) -> list[str]:
        """The server's command line (``--no-defaults``: no option file of the machine)."""
        options = [
            f"--{key}" if value is None else f"--{key}={value}"
            for key, value in self.settings.items()
        ]
        return [
            str(self.install.usr / "sbin" / "mariadbd"),
            "--no-defaults",
            f"--basedir={self.install.usr}",
            f"--datadir={self.datadir}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.workdir / 'mysqld.sock'}",
            f"--pid-file={self.workdir / 'mysqld.pid'}",
            f"--log-error={self.log_path}",
            "--skip-name-resolve",
            *self._server_user(),
            *options,
        ]

    def start(self, timeout: float = 60.0) -> None:
        """Start the server (creating the data folder the first time) and wait for it."""
        self.init()
        self.log_path.touch()
        self._chown(self.log_path)  # mariadbd opens it again for --log-error
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                self.command(),
                env=self.install.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                user=self.user,
                preexec_fn=die_with_parent,  # noqa: PLW1509
            )
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.connect().close()
                return
            except pymysql.err.OperationalError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    tail = self.log_path.read_text(errors="replace")[-3000:]
                    self.kill()
                    raise MariaDbSetupError(
                        f"mariadbd on port {self.port} did not start:\n{tail}"
                    ) from None
                time.sleep(0.1)

    def stop(self, timeout: float = 120.0) -> None:
        """Shut down cleanly (SIGTERM: InnoDB and the binary log are closed properly)."""
        if self._process is None:
            return
        self._process.send_signal(signal.SIGTERM)
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
            raise MariaDbSetupError(f"mariadbd ignored SIGTERM for {timeout} s") from None
        finally:
            self._process = None

    def kill(self) -> None:
        """Stop like a crash (SIGKILL): the next start runs InnoDB's crash recovery."""
        if self._process is None:
            return
        self._process.kill()
        self._process.wait()
        self._process = None

    def restart(
        self, *, crash: bool = False, settings: Mapping[str, str | None] | None = None
    ) -> None:
        """Stop (cleanly, or by SIGKILL when ``crash``) and start again on the same port with
        the same data folder; ``settings`` replace the server's options from then on."""
        if crash:
            self.kill()
        else:
            self.stop()
        if settings is not None:
            self.settings = dict(settings)
        self.start()

    def connect(
        self,
        database: str | None = None,
        *,
        user: str = "root",
        password: str = "",
        local_infile: bool = False,
    ) -> Connection:
        """A new autocommit connection over TCP (``local_infile``: LOAD DATA LOCAL allowed)."""
        return pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user=user,
            password=password,
            database=database,
            autocommit=True,
            connect_timeout=5,
            local_infile=local_infile,
        )

    def create_database(self, name: str) -> MariaDbDatabase:
        """Create a database (if missing)."""
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")
        return MariaDbDatabase(self, name)

    def remove(self) -> None:
        """Stop like a crash and delete the work folder."""
        self.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)


@dataclass(frozen=True)
class MariaDbDatabase:
    """One database on a shared server (a test's, or a bench run's)."""

    server: MariaDbServer
    name: str

    @property
    def dsn(self) -> str:
        """The URL form a sink spec will use: ``mysql://user@host:port/database``."""
        return f"mysql://root@127.0.0.1:{self.server.port}/{self.name}"

    def connect(
        self, *, user: str = "root", password: str = "", local_infile: bool = False
    ) -> Connection:
        """A new autocommit connection with this database selected."""
        return self.server.connect(
            self.name, user=user, password=password, local_infile=local_infile
        )


def temporary_server(
    settings: Mapping[str, str | None] = DEFAULT_SETTINGS, user: str | None = None
) -> MariaDbServer:
    """A started server in a new temporary folder (``remove()`` deletes it). The folder is
    short (``/tmp/eo-mariadb-*``): a Unix socket path must stay under 108 bytes."""
    workdir = Path(tempfile.mkdtemp(prefix="eo-mariadb-"))
    workdir.chmod(0o755)
    server = MariaDbServer(find_install(), workdir, settings, user)
    try:
        server.start()
    except BaseException:
        server.remove()
        raise
    return server
