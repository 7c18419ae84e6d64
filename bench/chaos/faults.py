"""The faults a chaos run injects. Each one lands at a random moment of a running pipeline and
leaves it to recover the way production does (a dead driver: fence, resolve, relaunch with a
new epoch, as the operator does; a live one: its own retries)."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import psycopg
import pymysql

from bench.chaos.audit import last_batch
from eo_jobs.protocol.faults import POINTS

if TYPE_CHECKING:
    from bench.chaos.run import Chaos

Fault = Callable[["Chaos"], str]
"""Injects one fault and returns what came of it (a word for the summary)."""


def _pause(chaos: Chaos) -> None:
    """A random moment: somewhere inside or between batches."""
    time.sleep(chaos.rng.uniform(0.0, 2.5))


def kill(chaos: Chaos) -> str:
    """SIGKILL the driver's process group at a random moment (a node or pod lost)."""
    _pause(chaos)
    chaos.driver.signal(signal.SIGKILL)
    chaos.driver.wait(30)
    chaos.relaunch("killed")
    return "killed"


def crash_point(chaos: Chaos) -> str:
    """SIGKILL the driver at a random protocol point of an upcoming batch."""
    point = chaos.rng.choice(POINTS)
    target = last_batch(chaos.dsn) + 2
    chaos.arm({"point": point, "batch": target, "action": "kill"})
    code = chaos.driver.wait(180)
    chaos.disarm()
    if code is None:
        return "not-reached"
    chaos.relaunch(f"crash point {point}")
    return point


def zombie(chaos: Chaos) -> str:
    """Freeze the driver (SIGSTOP), start a new epoch beside it, then wake the old one."""
    _pause(chaos)
    old = chaos.driver
    old.signal(signal.SIGSTOP)
    chaos.relaunch("zombie", keep_old=True)
    chaos.driver.wait_for_batches(1, 240)
    old.signal(signal.SIGCONT)
    code = old.wait(120)
    if code is None:
        old.signal(signal.SIGKILL)
        old.wait(30)
        return "zombie-idle"
    return f"zombie-exit-{code}"


def pg_restart(chaos: Chaos) -> str:
    """Restart PostgreSQL in immediate mode (a crash: no checkpoint, recovery on start)."""
    _pause(chaos)
    chaos.server.restart("immediate")
    return chaos.survived_or_relaunched("pg restart")


def task_failure(chaos: Chaos) -> str:
    """A writer task raises once after preparing: Spark retries it, the attempt is rolled back."""
    target = last_batch(chaos.dsn) + 2
    chaos.arm({"point": "after-some-prepared", "batch": target, "action": "raise"})
    deadline = time.monotonic() + 240
    while last_batch(chaos.dsn) < target and chaos.driver.alive():
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    chaos.disarm()
    return chaos.survived_or_relaunched("task failure")


def drop_connections(chaos: Chaos) -> str:
    """End every other session of the sink database (a failover, an idle timeout, a proxy)."""
    _pause(chaos)
    with psycopg.connect(chaos.dsn, autocommit=True) as conn:
        ended = conn.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    outcome = chaos.survived_or_relaunched("connections dropped")
    return f"{outcome}-{ended[0] if ended else 0}"


def mysql_restart(chaos: Chaos) -> str:
    """Crash MariaDB (SIGKILL) and start it again: InnoDB's crash recovery keeps what was
    prepared (the sink's branches), and everything else of the writers' sessions is gone."""
    _pause(chaos)
    assert chaos.mysql is not None, "mysql faults need --sink mysql"
    chaos.mysql.restart(crash=True)
    return chaos.survived_or_relaunched("mysql restart")


def mysql_drop_connections(chaos: Chaos) -> str:
    """KILL every other session of the sink database in MariaDB (a failover, a proxy)."""
    _pause(chaos)
    assert chaos.mysql is not None, "mysql faults need --sink mysql"
    ended = 0
    with chaos.mysql.connect() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT id FROM information_schema.PROCESSLIST "
            "WHERE db = 'chaos' AND id <> CONNECTION_ID()"
        )
        for (session,) in cur.fetchall():
            with contextlib.suppress(pymysql.Error):  # it may have ended meanwhile
                cur.execute(f"KILL {int(session)}")
                ended += 1
    outcome = chaos.survived_or_relaunched("mysql connections dropped")
    return f"{outcome}-{ended}"


KINDS: dict[str, Fault] = {
    "kill": kill,
    "crash-point": crash_point,
    "zombie": zombie,
    "pg-restart": pg_restart,
    "task-failure": task_failure,
    "drop-connections": drop_connections,
}
MYSQL_KINDS: dict[str, Fault] = {
    "mysql-restart": mysql_restart,
    "mysql-drop-connections": mysql_drop_connections,
}
"""Faults of the MariaDB sink database (``--sink mysql`` only)."""
