"""What the driver needs of any sink database's table writer (the kinds in ``sinks.kinds``).

A writer is a small frozen dataclass shipped to Spark executors as is: where (``dsn``,
``table``), what (``columns``), and ``write`` for rows the driver holds itself (the dead letters
of a batch whose records had to be isolated). Writer tasks go through their kind's
``SinkKind.run_task``, which knows the fast path of its database.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol


class TableWriter(Protocol):
    """A picklable, hashable description of one table write."""

    @property
    def dsn(self) -> str:
        """The database, as the sink's credential gives it."""

    @property
    def table(self) -> str:
        """``schema.table`` (PostgreSQL) or ``database.table`` (MySQL)."""

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns written, in the rows' order."""

    def write(
        self, rows: Iterable[Sequence[Any]], *, gid: str | None, pipeline: str, batch_id: int
    ) -> int:
        """Write ``rows`` in one transaction: prepared under ``gid``, or committed if None."""
        ...
