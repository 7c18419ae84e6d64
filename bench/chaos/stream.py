"""The generated stream: JSON records written while the pipeline runs, and their truth.

Records go out in chunks, as a JSON-lines file (written, then renamed: Spark never sees half a
file) or as messages to a real Kafka topic. About 1% are malformed (they must end up as dead
letters, exactly once), and every valid record's merchant and amount are remembered, so the
audit can check rows, duplicates, gaps and per-merchant sums.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

MERCHANTS = 20
CHUNK = 300
CHUNK_SECONDS = 1.5
"""200 records/s: well below what the pipeline takes on two cores (a batch takes up to 8 chunks),
so a backlog built up during faults is worked off and the final drain is short."""
SCHEMA = "order_id BIGINT, merchant STRING, amount_cents BIGINT"


@dataclass
class Truth:
    """Everything generated so far."""

    valid: dict[int, tuple[str, int]] = field(default_factory=dict)
    malformed: set[str] = field(default_factory=set)
    files: int = 0


class Emitter(Protocol):
    """Where a chunk of lines goes (a file, a topic)."""

    def __call__(self, index: int, lines: list[str]) -> None: ...


def file_emitter(folder: Path) -> Emitter:
    """Chunk ``index`` as ``part-<index>.json`` in ``folder``, renamed in whole."""
    folder.mkdir(parents=True, exist_ok=True)

    def emit(index: int, lines: list[str]) -> None:
        tmp = folder / f".part-{index:06d}.tmp"
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        tmp.rename(folder / f"part-{index:06d}.json")

    return emit


def kafka_emitter(produce: Callable[[list[tuple[str, str]]], None]) -> Emitter:
    """Every line as one message (acknowledged before the chunk counts as written)."""

    def emit(index: int, lines: list[str]) -> None:
        produce([(f"{index}-{n}", line) for n, line in enumerate(lines)])

    return emit


class Stream:
    """Emits one chunk of ``per_file`` records every ``interval`` seconds until stopped."""

    def __init__(self, emit: Emitter, seed: int, per_file: int, interval: float) -> None:
        self.emit = emit
        self.per_file = per_file
        self.interval = interval
        self.truth = Truth()
        self._rng = random.Random(seed)  # noqa: S311 - reproducible test data
        self._next_id = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="chaos-stream", daemon=True)

    def start(self) -> None:
        """Begin writing files in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Write no more files (the one being written is finished first); idempotent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.write_file()

    def write_file(self) -> None:
        """One more chunk of records."""
        with self._lock:
            lines = []
            for _ in range(self.per_file):
                order_id = self._next_id
                self._next_id += 1
                merchant = f"m{self._rng.randrange(MERCHANTS):02d}"
                amount = self._rng.randrange(1, 1_000_000)
                lines.append(
                    json.dumps({"order_id": order_id, "merchant": merchant, "amount_cents": amount})
                )
                self.truth.valid[order_id] = (merchant, amount)
                if self._rng.random() < 0.01:
                    bad = f'{{"order_id": {10**12 + order_id}, "merchant": '
                    lines.append(bad)
                    self.truth.malformed.add(bad)
            self.emit(self.truth.files, lines)
            self.truth.files += 1
