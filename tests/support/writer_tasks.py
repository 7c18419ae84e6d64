"""The writer task the JVM writer tests of each sink hand to both writers, the JVM's and the
Python's: batch 5 of sink ``kinds`` of pipeline ``test/kinds`` at epoch 3, so that a test can
name the gids, markers and dead letters either writer makes for it."""

from __future__ import annotations

import os

from eo_jobs.runtime.task import WriterTask
from eo_jobs.sinks.table_writer import TableWriter


def kinds_task(
    writer: TableWriter,
    *,
    query_id: str,
    two_phase: bool,
    dead: TableWriter | None = None,
    refused_table: str | None = None,
) -> WriterTask:
    """Batch 5's task of ``writer``, run by this process as its driver (``query_id``: each test
    module's own, so that no two modules' markers could be taken for one query's)."""
    return WriterTask(
        writer=writer,
        pipeline="test/kinds",
        query_id=query_id,
        sink="kinds",
        epoch=3,
        batch_id=5,
        two_phase=two_phase,
        driver_pid=os.getpid(),
        dead_letters=dead,
        refused_table=refused_table,
    )
