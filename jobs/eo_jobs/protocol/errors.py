"""Protocol errors. Each one says what happened and what the user or operator should do."""

from __future__ import annotations

EXIT_FENCED = 75
"""Exit code of a driver that found itself fenced (a newer epoch owns the pipeline)."""
EXIT_CHECKPOINT_RESET = 76
"""Exit code of a driver whose checkpoint does not match the decision log."""
EXIT_SINK_CONTRACT = 77
"""Exit code of a driver whose sink cannot honour the exactly-once contract."""
EXIT_LIFECYCLE_REFUSED = 79
"""Exit code of a driver that refused a lifecycle action of its spec (a start-over whose new
query would read again what the old one wrote): nothing was moved or deleted."""


class ProtocolError(RuntimeError):
    """Base class of commit-protocol failures."""


class FencedError(ProtocolError):
    """This driver's epoch is older than the sink fence: a newer driver owns the pipeline."""

    def __init__(self, pipeline: str, epoch: int, fence: int | None) -> None:
        self.pipeline, self.epoch, self.fence = pipeline, epoch, fence
        super().__init__(
            f"fenced: pipeline {pipeline} epoch {epoch} is older than the sink fence "
            f"{fence}; a newer driver owns this pipeline, so this one stops without deciding"
        )


class FenceRegressionError(ProtocolError):
    """Someone asked to lower the fence, which would re-enable zombies."""

    def __init__(self, pipeline: str, requested: int, current: int) -> None:
        self.requested = requested
        self.current = current
        super().__init__(
            f"refusing to lower the fence of {pipeline} from {current} to {requested}: "
            f"use an epoch >= {current} (the operator's eo.dev/epoch annotation, plus one)"
        )


class CheckpointResetError(ProtocolError):
    """The Spark checkpoint was replaced or lost while decisions of the pipeline exist."""


class LifecycleRefusedError(ProtocolError):
    """A lifecycle action (spec.lifecycle) would break the sink's exactness: not done."""


class CheckpointMismatchError(ProtocolError):
    """A replayed batch has different source offsets than the decided one."""


class LostParticipantError(ProtocolError):
    """A decided participant vanished without its marker: it was rolled back. Never expected."""


class InvariantViolationError(ProtocolError):
    """A participant believed undecided turned out committed. Never expected; stop loudly."""
