"""The generated stream: JSON-lines files written while the pipeline runs, and their truth.

Files appear atomically (write, then rename), a few lines in each are malformed (they must end
up as dead letters, exactly once), and every valid record's merchant and amount are remembered,
so the audit can check rows, duplicates, gaps and per-merchant sums.
"""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

MERCHANTS = 20
SCHEMA = "order_id BIGINT, merchant STRING, amount_cents BIGINT"


@dataclass
class Truth:
    """Everything generated so far."""

    valid: dict[int, tuple[str, int]] = field(default_factory=dict)
    malformed: set[str] = field(default_factory=set)
    files: int = 0


class Stream:
    """Writes one file of ``per_file`` records every ``interval`` seconds until stopped."""

    def __init__(self, folder: Path, seed: int, per_file: int, interval: float) -> None:
        self.folder = folder
        self.per_file = per_file
        self.interval = interval
        self.truth = Truth()
        self._rng = random.Random(seed)  # noqa: S311 - reproducible test data
        self._next_id = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="chaos-stream", daemon=True)
        folder.mkdir(parents=True, exist_ok=True)

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
        """One more file, atomically renamed into the source folder."""
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
            index = self.truth.files
            tmp = self.folder / f".part-{index:06d}.tmp"
            tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
            tmp.rename(self.folder / f"part-{index:06d}.json")
            self.truth.files += 1
