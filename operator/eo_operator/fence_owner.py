"""Who owns a pipeline's sink fence, and the explicit hand-over between two owners.

The operator claims the fence for the pipeline object, by its UID: distinct in every cluster,
and new when an object is deleted and re-created or restored from a backup. Two objects with
the same namespace and name in two clusters that share the sink database (a DR pair, a
blue/green migration, a restore while the old cluster still runs) therefore never both run
drivers: the second one waits, says why in its ``FenceOwned`` condition and an event, and
launches nothing, until the first lets go (its deletion releases the fence) or a person hands
the fence over with the ``eo.dev/adopt-fence`` annotation naming the old owner (or with
``eo release-fence``). The new owner then always takes an epoch strictly above the old one's.
"""

from __future__ import annotations

from typing import Any

from eo_jobs.protocol.control import Fence, ForeignFenceOwnerError

ADOPT_ANNOTATION = "eo.dev/adopt-fence"
"""Set to the owner named in the ``FenceOwned`` condition to take the fence over from it; the
operator removes it once the fence is taken."""


def fence_owner(obj: dict[str, Any]) -> str:
    """The fence owner of a pipeline object: its UID."""
    return str(obj["metadata"]["uid"])


def adoption(obj: dict[str, Any], key: str, epoch: int, fence: Fence | None) -> str | None:
    """The owner to adopt the fence from, None when the fence is free or already ours.

    Raises ``ForeignFenceOwnerError`` when another writer owns it and the object's
    ``eo.dev/adopt-fence`` annotation does not name that writer.
    """
    ours = fence_owner(obj)
    if fence is None or fence.owner is None or fence.owner == ours:
        return None
    annotations = obj["metadata"].get("annotations") or {}
    if annotations.get(ADOPT_ANNOTATION) == fence.owner:
        return fence.owner
    raise ForeignFenceOwnerError(key, epoch, fence.epoch, fence.owner, ours)
