"""Where the control-plane binaries live, and a clear error when they were never built.

The binaries are built from the versions pinned in ``tools/cluster`` into
``${EO_CACHE}/cluster-tools/<k8s-version>/bin``. Reading the version from ``go.mod`` (rather
than hard-coding it) keeps this module and the build script agreeing after a version bump.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS_MODULE = REPO_ROOT / "tools" / "cluster" / "go.mod"
BUILD_HINT = "run `make cluster-tools` (or scripts/build-cluster-tools.sh) first"


class ClusterToolsMissingError(RuntimeError):
    """The control-plane binaries are not built; the message says how to build them."""


@dataclass(frozen=True)
class ClusterBinaries:
    """Absolute paths of the three control-plane executables."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path


def kubernetes_version(go_mod: Path = TOOLS_MODULE) -> str:
    """Return the pinned ``k8s.io/kubernetes`` version, e.g. ``v1.37.1``."""
    pattern = r"^\s*(?:require\s+)?k8s\.io/kubernetes\s+(v\S+)"
    match = re.search(pattern, go_mod.read_text(), re.MULTILINE)
    if match is None:
        raise ClusterToolsMissingError(f"{go_mod} does not require k8s.io/kubernetes")
    return match.group(1)


def bin_dir() -> Path:
    """The folder the build script writes to (``EO_CLUSTER_BIN`` overrides it)."""
    override = os.environ.get("EO_CLUSTER_BIN")
    if override:
        return Path(override)
    cache = Path(os.environ.get("EO_CACHE") or Path.home() / ".cache" / "eo")
    return cache / "cluster-tools" / kubernetes_version() / "bin"


def find_binaries() -> ClusterBinaries:
    """Locate the binaries or raise :class:`ClusterToolsMissingError` naming the missing ones."""
    folder = bin_dir()
    found = ClusterBinaries(
        etcd=folder / "etcd",
        kube_apiserver=folder / "kube-apiserver",
        kube_controller_manager=folder / "kube-controller-manager",
    )
    missing = [p.name for p in vars(found).values() if not os.access(p, os.X_OK)]
    if missing:
        raise ClusterToolsMissingError(
            f"control-plane binaries missing in {folder}: {', '.join(missing)}; {BUILD_HINT}"
        )
    return found
