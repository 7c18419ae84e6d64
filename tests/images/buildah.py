"""Images built and run with buildah (chroot isolation: no Docker engine, no runc/crun).

``scripts/build-images.sh`` installs buildah and debootstrap, builds the local Debian base
once, then both Dockerfile targets; these helpers build through it and run commands in the
images as the image's own configuration says (user, environment, working directory,
entrypoint), sharing the host's network, as chroot isolation does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build-images.sh"
TAG = os.environ.get("EO_IMAGE_TAG", "local")
UID = 10001
BUILD_TIMEOUT = 2400
"""Seconds one run of the build script may take (a cold base and target build included)."""


def image_name(target: str) -> str:
    """The name scripts/build-images.sh gives a Dockerfile target."""
    return f"localhost/eo-{target}:{TAG}"


def unavailable() -> str | None:
    """Why images cannot be built here, or None when they can (as root they always can:
    the script installs what is missing, and fails, not skips, when it cannot)."""
    if os.geteuid() != 0:
        return "buildah's chroot builds and runs need root (CI runs as root)"
    return None


@dataclass(frozen=True)
class Build:
    """One run of scripts/build-images.sh."""

    args: tuple[str, ...]
    code: int
    seconds: float
    log: Path

    def tail(self, lines: int = 60) -> str:
        """The end of the build's output."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def build(log: Path, *args: str) -> Build:
    """Run the build script with ``args`` (a target: the base first, when it is not cached),
    output into ``log``."""
    started = time.monotonic()
    with log.open("w") as out:
        code = subprocess.call(
            [str(SCRIPT), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            timeout=BUILD_TIMEOUT,
        )
    return Build(args, code, time.monotonic() - started, log)


def image_id(image: str) -> str | None:
    """The image's id, or None when buildah's storage has no image of that name."""
    found = subprocess.run(
        ["buildah", "inspect", "--type", "image", "--format", "{{.FromImageID}}", image],
        capture_output=True,
        text=True,
        check=False,
    )
    return found.stdout.strip() if found.returncode == 0 else None


def inspect(image: str) -> dict[str, object]:
    """The image's OCI configuration (``config``: User, Env, Entrypoint, Cmd, WorkingDir)."""
    out = subprocess.run(
        ["buildah", "inspect", "--type", "image", image],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    config: dict[str, object] = json.loads(out)["OCIv1"]["config"]
    return config


# buildah prints sizes as Docker does (go-units HumanSize: decimal units, 3 significant digits).
SIZE_UNITS = {"B": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


def parse_size(text: str) -> int:
    """Bytes of a size as buildah prints it (``331 MB``, ``1.38 GB``)."""
    match = re.fullmatch(r"([0-9.]+)\s*(B|kB|MB|GB|TB)", text.strip())
    assert match, f"not a buildah size: {text!r}"
    return round(float(match.group(1)) * SIZE_UNITS[match.group(2)])


def size_bytes(image: str) -> int:
    """The image's size as buildah reports it (the sum of its uncompressed layers)."""
    out = subprocess.run(
        ["buildah", "images", "--json", image], check=True, capture_output=True, text=True
    ).stdout
    return parse_size(json.loads(out)[0]["size"])


class Container:
    """A working container of an image; ``run`` executes one command in it."""

    def __init__(self, name: str, image: str) -> None:
        self.name = name
        self.config = inspect(image)

    def run(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        volumes: Sequence[tuple[Path, str]] = (),
        user: str | None = None,
        timeout: float = 300,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` (not through the entrypoint) with the image's user unless given.

        The host's network and host name: buildah would name the container by its id, which
        its /etc/hosts (a copy of the host's) does not resolve, and Spark resolves its own
        host name at start (a pod's is in the /etc/hosts the kubelet writes).
        """
        cmd = ["buildah", "run", "--isolation", "chroot", "--uts", "host"]
        if user is not None:
            cmd += ["--user", user]
        for key, value in (env or {}).items():
            cmd += ["--env", f"{key}={value}"]
        for source, target in volumes:
            cmd += ["--volume", f"{source}:{target}"]
        cmd += [self.name, "--", *argv]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)

    def entrypoint(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        volumes: Sequence[tuple[Path, str]] = (),
        user: str | None = None,
        timeout: float = 300,
    ) -> subprocess.CompletedProcess[str]:
        """Run the image's ENTRYPOINT with ``args`` (what `docker run [--user U] IMAGE args`
        does)."""
        entry = self.config.get("Entrypoint") or []
        assert isinstance(entry, list)
        return self.run([*entry, *args], env=env, volumes=volumes, user=user, timeout=timeout)


@contextmanager
def container(image: str) -> Iterator[Container]:
    """A fresh working container of ``image``, removed afterwards."""
    name = subprocess.run(
        ["buildah", "from", "--pull=never", image],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    try:
        yield Container(name, image)
    finally:
        subprocess.run(["buildah", "rm", name], capture_output=True, check=False)
