"""A writer task's rows, kept until its write ends in case the table refuses one of them.

The slow path of ``refusals`` writes the task's rows again in pieces, so a task that may turn
refused records into dead letters keeps the Arrow record batches Spark handed it until its
transaction is prepared. Why a bound: those rows grow with the task, and a batch of many millions
of rows in few writer partitions would hold all of them in the Python worker beside Spark's own
memory. The first ``memory_bytes`` stay in memory; the rest go, as an Arrow IPC stream, to a
file in the temporary folder (the pod's ``/tmp`` emptyDir), unlinked as soon as it is open so
that no kill leaves it behind, and read back memory-mapped, only if the table refused a row.
The JVM writer keeps its binary COPY payload the same way (``Refusals.Kept`` in ``jvm/writer``),
under the same bound (``WriterTask.kept_memory_bytes``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import IO, Any

import pyarrow as pa  # type: ignore[import-untyped]

KEPT_MEMORY_BYTES = 64 << 20
"""How much of a task's rows is kept in memory (the rest spills to a file): 64 MiB, a small part
of an executor's heap, and more than a task of 200,000 typical payment records holds."""


class KeptBatches:
    """Record batches kept as a stream hands them over: in memory up to a bound, then in a file."""

    def __init__(self, memory_bytes: int = KEPT_MEMORY_BYTES) -> None:
        self._memory_bytes = memory_bytes
        self._in_memory = 0
        self._held: list[Any] = []
        self._file: IO[bytes] | None = None
        self._stream: Any = None
        self.spilled_batches = 0

    def keeping(self, stream: Iterator[Any]) -> Iterator[Any]:
        """``stream`` as it is, each batch kept on its way through."""
        for batch in stream:
            self._keep(batch)
            yield batch

    def _keep(self, batch: Any) -> None:
        if self._file is None and self._in_memory + batch.nbytes <= self._memory_bytes:
            self._held.append(batch)
            self._in_memory += batch.nbytes
            return
        if self._stream is None:
            self._file = tempfile.TemporaryFile(prefix="eo-kept-", suffix=".arrows")  # noqa: SIM115
            self._stream = pa.ipc.new_stream(self._file, batch.schema)
        self._stream.write_batch(batch)
        self.spilled_batches += 1

    def table(self) -> Any:
        """Every kept row, in the order kept, as one Arrow table (the file's part mapped)."""
        batches = list(self._held)
        if self._stream is not None and self._file is not None:
            self._stream.close()
            self._stream = None
            self._file.flush()
            mapped = pa.memory_map(f"/proc/self/fd/{self._file.fileno()}")
            batches.extend(pa.ipc.open_stream(mapped).read_all().to_batches())
        return pa.Table.from_batches(batches)

    def close(self) -> None:
        """Lets the kept rows go (the file's space with them)."""
        self._held.clear()
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if self._file is not None:
            self._file.close()
            self._file = None
