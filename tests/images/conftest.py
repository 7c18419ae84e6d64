"""Session fixtures: both images built once through scripts/build-images.sh (cached)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.images import buildah

_builds: dict[str, buildah.Build] = {}


def _built(target: str, tmp_path_factory: pytest.TempPathFactory) -> buildah.Build:
    """Build ``target`` once per session (the script itself caches base and layers)."""
    reason = buildah.unavailable()
    if reason:
        pytest.skip(reason)
    if target not in _builds:
        log = tmp_path_factory.mktemp("images") / f"build-{target}.log"
        _builds[target] = buildah.build(log, target)
    return _builds[target]


def _image(target: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    result = _built(target, tmp_path_factory)
    if result.code != 0:
        pytest.fail(f"scripts/build-images.sh {target} failed ({result.code}):\n{result.tail()}")
    return buildah.image_name(target)


@pytest.fixture(scope="session")
def job_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """localhost/eo-job:<tag>, built from this checkout."""
    return _image("job", tmp_path_factory)


@pytest.fixture(scope="session")
def operator_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """localhost/eo-operator:<tag>, built from this checkout."""
    return _image("operator", tmp_path_factory)


@pytest.fixture(scope="session")
def build(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], buildah.Build]:
    """Build a target (once per session) and return the result, failed or not."""
    return lambda target: _built(target, tmp_path_factory)
