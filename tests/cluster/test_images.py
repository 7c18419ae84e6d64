"""Which images the process kubelet fails to pull: only those of a registry that never resolves."""

from __future__ import annotations

import pytest

from tests.cluster.images import MAX_BACKOFF_SECONDS, PullBackoff, pull_error


@pytest.mark.parametrize(
    "image",
    ["eo-job:latest", "library/python:3.12", "ghcr.io/eo-dev/eo-job:1", "localhost:5000/eo:1"],
)
def test_every_resolvable_image_pulls(image: str) -> None:
    assert pull_error(image) is None


@pytest.mark.parametrize(
    "image", ["registry.invalid/eo-job:1", "mirror.example.invalid:5000/eo/job", "invalid:80/x"]
)
def test_a_registry_in_the_invalid_domain_never_resolves(image: str) -> None:
    error = pull_error(image)
    assert error is not None and f'failed to pull and unpack image "{image}"' in error
    assert "no such host" in error


def test_pull_retries_back_off_from_10_seconds_doubling_to_300() -> None:
    pulls = PullBackoff()
    delays = []
    for _ in range(7):
        before = pulls.retry_at
        pulls.failed(before)
        delays.append(pulls.retry_at - before)
    assert delays == [10, 20, 40, 80, 160, MAX_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS]
