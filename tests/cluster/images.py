"""Image pulls as the process kubelet fakes them: every image resolves to this checkout, except
one whose registry can never resolve.

Images are not pulled (``podprocess`` runs this venv's commands whatever the image says), so a
pull cannot fail for the usual reasons. A registry in the ``.invalid`` top-level domain, which
RFC 2606 reserves so that it never resolves anywhere, fails the way it fails on a real node:
the runtime cannot look the host up, the kubelet reports ``ErrImagePull`` and then
``ImagePullBackOff`` while it waits to retry, with the real kubelet's backoff (10 s doubling to
300 s), and the pod stays Pending.
"""

from __future__ import annotations

from dataclasses import dataclass

BACKOFF_SECONDS = 10.0
MAX_BACKOFF_SECONDS = 300.0


def _registry(image: str) -> str | None:
    """The registry host of ``image`` (without port), or None for Docker Hub's short names."""
    first, slash, _rest = image.partition("/")
    if not slash or not ("." in first or ":" in first or first == "localhost"):
        return None
    return first.split(":", 1)[0].lower()


def pull_error(image: str) -> str | None:
    """The container runtime's error for an image it cannot pull, or None if it "pulls"."""
    host = _registry(image)
    if host is None or not (host == "invalid" or host.endswith(".invalid")):
        return None
    name, _, tag = image.partition("/")[2].partition(":")
    return (
        f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": '
        f'failed to resolve reference "{image}": failed to do request: Head '
        f'"https://{host}/v2/{name}/manifests/{tag or "latest"}": dial tcp: lookup {host}: '
        "no such host"
    )


@dataclass
class PullBackoff:
    """Failed pulls of one pod's image and when the next try is due (monotonic seconds)."""

    failures: int = 0
    retry_at: float = 0.0

    def failed(self, now: float) -> None:
        """Record a failed pull at ``now``; the next try waits twice as long as the last."""
        self.failures += 1
        delay = min(BACKOFF_SECONDS * 2 ** (self.failures - 1), MAX_BACKOFF_SECONDS)
        self.retry_at = now + delay
