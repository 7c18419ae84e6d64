"""A zombie driver cannot write Spark's checkpoint once a newer epoch has recorded itself there.

The sink fence stops a zombie at its decision, but its stream logs the next batch's files and
offsets before that; issue 27 item 6: the live driver's query then failed with "Concurrent
update to the log". Real drivers: one frozen (SIGSTOP) while idle, a newer epoch runs, new input
arrives, the zombie is woken.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from tests.runtime import harness

from eo_jobs.protocol.errors import EXIT_FENCED

pytestmark = pytest.mark.spark


def test_a_woken_zombie_writes_nothing_into_the_checkpoint_and_exits_fenced(
    tmp_path: Path, pg_dsn: str
) -> None:
    harness.create_table(pg_dsn)
    truth = harness.write_files(tmp_path / "in", files=2, per_file=30, malformed_every=999)
    spec = harness.files_pipeline(tmp_path, per_trigger=1)
    zombie = harness.Driver(spec, 1, pg_dsn, available_now=False)
    try:
        _freeze_run_newer_and_wake(zombie, spec, pg_dsn, tmp_path, truth)
    finally:
        zombie.kill(signal.SIGCONT)
        zombie.kill()
    checkpoint = tmp_path / "checkpoint"
    assert not (checkpoint / "offsets" / "2").exists()
    assert not (checkpoint / "sources" / "0" / "2").exists()
    code, out = harness.run(spec, 3, pg_dsn)
    assert code == 0, out
    harness.assert_exact(pg_dsn, truth)
    assert sorted(p.name for p in (checkpoint / "eo-fence").iterdir()) == ["3"]


def _freeze_run_newer_and_wake(
    zombie: harness.Driver, spec: Path, dsn: str, work: Path, truth: harness.Truth
) -> None:
    """Freeze ``zombie`` once idle after 2 batches, run epoch 2 to its end, add a file, wake
    the zombie and require it to exit fenced by the checkpoint (the caller kills it anyway).

    Idle means Spark has logged batch 1 (``commits/1``), not only that eo reported it: frozen
    in between, the zombie's first write on waking is that log entry, which epoch 2 wrote too.
    """
    deadline = time.monotonic() + 300
    while zombie.batches_done() < 2 or not (work / "checkpoint" / "commits" / "1").exists():
        assert zombie.proc.poll() is None and time.monotonic() < deadline, zombie.output()
        time.sleep(0.2)
    zombie.kill(signal.SIGSTOP)
    code, out = harness.run(spec, 2, dsn)
    assert code == 0, out
    later = harness.write_files(
        work / "in", files=1, per_file=30, start=30_000, malformed_every=999
    )
    truth.valid.update(later.valid)
    zombie.kill(signal.SIGCONT)
    assert zombie.wait(120) == EXIT_FENCED, zombie.output()
    assert "eo: checkpoint fenced" in zombie.output()
