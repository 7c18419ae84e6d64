"""A real S3-compatible server for tests: moto's server, as a child process on loopback.

No object store is reachable from CI. `scripts/install-s3-server.sh` (run by `./dev setup`)
installs moto into its own virtualenv in the tool cache; this module starts its `moto_server`
and talks plain HTTP to it (moto accepts unsigned requests for bucket setup and listing).
Spark reaches it through Hadoop's S3A, exactly as it would reach AWS or MinIO.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import pytest

from eo_jobs.runtime.packages import eo_cache
from tests.support.process import die_with_parent, free_port

INSTALL_SCRIPT = "scripts/install-s3-server.sh"
_PLACEHOLDER_AUTH = (
    "AWS4-HMAC-SHA256 Credential=eo-test/20260101/us-east-1/s3/aws4_request, "
    "SignedHeaders=host, Signature=0"
)


class S3SetupError(RuntimeError):
    """moto is not installed in the tool cache; the message names the script that does it."""


def moto_server_binary() -> Path:
    """The newest installed moto_server of the tool cache (`EO_MOTO_SERVER` overrides)."""
    override = os.environ.get("EO_MOTO_SERVER")
    if override:
        return Path(override)
    found = sorted((eo_cache() / "moto").glob("*/.complete"))
    if not found:
        raise S3SetupError(
            f"moto's S3 server is not in {eo_cache() / 'moto'}: run `./dev setup` or "
            f"`{INSTALL_SCRIPT}`"
        )
    return found[-1].parent / "bin" / "moto_server"


class S3Server:
    """One moto S3 server on 127.0.0.1; use as a context manager."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.log_path = workdir / "moto.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """The endpoint URL for S3 clients (path-style addressing)."""
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self._log = self.log_path.open("ab")
        self._process = subprocess.Popen(
            [str(moto_server_binary()), "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,  # noqa: PLW1509
        )
        deadline = time.monotonic() + 60
        while not self._answers():
            if self._process.poll() is not None or time.monotonic() > deadline:
                log = self.log_path.read_text(errors="replace")[-3000:]
                raise S3SetupError(f"moto_server on {self.endpoint} did not start:\n{log}")
            time.sleep(0.1)
        return self

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._log is not None:
            self._log.close()

    def create_bucket(self, bucket: str) -> None:
        """A new, empty bucket."""
        self._request("PUT", f"/{bucket}")

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key under ``prefix`` (ListObjectsV2, following continuation tokens)."""
        keys: list[str] = []
        token = ""
        while True:
            query = f"list-type=2&prefix={urllib.request.quote(prefix)}"
            if token:
                query += f"&continuation-token={urllib.request.quote(token)}"
            body = self._request("GET", f"/{bucket}?{query}")
            keys += re.findall(r"<Key>([^<]*)</Key>", body)
            next_token = re.search(r"<NextContinuationToken>([^<]*)<", body)
            if next_token is None:
                return keys
            token = next_token.group(1)

    def delete(self, bucket: str, key: str) -> None:
        """Remove one object."""
        self._request("DELETE", f"/{bucket}/{key}")

    def _answers(self) -> bool:
        try:
            self._request("GET", "/", timeout=1)
        except (OSError, urllib.error.URLError):
            return False
        return True

    def _request(self, method: str, path: str, timeout: float = 30) -> str:
        # moto checks that a request carries credentials, not their signature; S3A in the
        # driver signs for real (SigV4), this setup helper only needs to be let in.
        headers = {"Authorization": _PLACEHOLDER_AUTH}
        request = urllib.request.Request(self.endpoint + path, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return str(response.read().decode("utf-8"))


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One S3 server per test session (per xdist worker); tests isolate by bucket."""
    with S3Server(tmp_path_factory.mktemp("s3")) as server:
        yield server
