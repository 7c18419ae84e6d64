"""Which database decides a pipeline, and which databases have held its participants.

The decision log and the fence of a pipeline live in one control database. If a spec edit
silently moved them (sinks reordered, the first sink re-pointed), every decision would be
forgotten: a replay would write decided batches again, a zombie would stay unfenced in the old
database, and prepared transactions there would never be resolved. So every database gets a
stable random identity (``eo.database_identity``), every participant database records which
control database decides the pipeline (``eo.decided_by``), and the control database records
every database that ever held a participant of the pipeline, with the credential *reference*
(never the secret) that reaches it (``eo.participant_databases``). The tables are part of
schema ``eo`` (``control.DDL``) in PostgreSQL, tables ``eo_*`` in MySQL. A driver refuses to start
when a participant database names another control database, and recovery and the sweep visit
every recorded database, not only the sinks of the current spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg

from eo_jobs.protocol.control_api import ControlDatabase, ParticipantDatabase
from eo_jobs.protocol.participants import ParticipantStore


class ControlMovedError(RuntimeError):
    """A participant database is decided by another control database than the spec names."""


def database_id(conn: psycopg.Connection[Any]) -> str:
    """This database's stable identity (created on first use; schema ``eo`` exists)."""
    conn.execute("INSERT INTO eo.database_identity DEFAULT VALUES ON CONFLICT DO NOTHING")
    row = conn.execute("SELECT id::text FROM eo.database_identity").fetchone()
    assert row is not None
    return str(row[0])


def label(dsn: str) -> str:
    """``host:port/dbname`` of a DSN, for messages (no user, no password)."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    return f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"


def claim(
    control: ControlDatabase,
    participants: Mapping[str, tuple[ParticipantStore, Mapping[str, Any]]],
    pipeline: str,
) -> None:
    """Record ``control`` as the decider of ``pipeline`` in every participant database.

    ``participants`` maps a sink name to its database's store (any kind: each records the
    decider in its own tables) and its credential reference. Raises ``ControlMovedError`` when
    a database already names another control database. ``control`` may be of any kind too.
    """
    control_id = control.identity()
    control_label = control.label()
    for sink, (store, dsn_ref) in participants.items():
        store_id = store.identity()
        decider, decider_label = store.decided_by(pipeline, control_id, control_label)
        if decider != control_id:
            raise ControlMovedError(
                f"sink {sink} ({store.label()}) holds participants of {pipeline} decided by "
                f"the control database {decider_label}, but this spec's control database is "
                f"{control_label}: its decision log would be forgotten and decided batches "
                "written again. Put the spec back (spec.control, or the first sink), or run "
                "`eo recover` with the old spec first and then `eo forget-query` to start over."
            )
        control.record_participant_database(pipeline, store_id, sink, store.label(), dsn_ref)


def decided_by(
    conn: psycopg.Connection[Any], pipeline: str, control_id: str, control_label: str
) -> tuple[str, str]:
    """``ParticipantStore.decided_by`` of a PostgreSQL database (schema ``eo`` exists)."""
    conn.execute(
        """INSERT INTO eo.decided_by (pipeline, control_database, control_label)
           VALUES (%s, %s, %s) ON CONFLICT (pipeline) DO NOTHING""",
        (pipeline, control_id, control_label),
    )
    row = conn.execute(
        "SELECT control_database::text, control_label FROM eo.decided_by WHERE pipeline = %s",
        (pipeline,),
    ).fetchone()
    assert row is not None
    return str(row[0]), str(row[1])


def recorded(control: ControlDatabase, pipeline: str) -> list[ParticipantDatabase]:
    """Every database the control database saw holding participants of ``pipeline``."""
    return control.participant_databases(pipeline)
