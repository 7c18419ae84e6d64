"""Exit codes of the ``eo`` command, and ordinary failures turned into one line for people.

An ordinary mistake (a missing file, a database that is down, a missing privilege, an extra
that is not installed) gets one line on stderr saying what is wrong and what to do, and an exit
code of its class; ``eo --debug`` adds the traceback. Anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib import metadata

import psycopg
import pymysql

from eo_jobs.protocol.errors import (
    EXIT_CHECKPOINT_RESET,
    EXIT_FENCED,
    EXIT_LIFECYCLE_REFUSED,
    EXIT_SINK_CONTRACT,
    CheckpointMismatchError,
    CheckpointResetError,
    FencedError,
    ProtocolError,
)
from eo_jobs.protocol.registry import ControlMovedError
from eo_jobs.sinks.postgres.credentials import MissingCredentialError
from eo_jobs.spec import InputError, SpecError
from eo_jobs.spec.kafka import MissingKafkaCredentialError
from eo_jobs.spec.s3 import MissingS3CredentialError

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INVALID = 3
EXIT_NO_INPUT = 4
EXIT_DATABASE = 5
EXIT_PRIVILEGE = 6
EXIT_MISSING_EXTRA = 7
EXIT_AUDIT_VIOLATION = 78
"""``eo audit`` found a violation, or ``eo report --verify``'s report no longer matches."""
EXIT_INTERRUPTED = 130

EXIT_CODES = f"""exit codes:
  0   success
  {EXIT_FAILED:<3} failed: eo refused or could not finish (the cause is printed on stderr)
  {EXIT_USAGE:<3} usage error: a wrong argument, or a DSN variable the command needs is unset
  {EXIT_INVALID:<3} the pipeline is invalid (every problem is listed with its field path)
  {EXIT_NO_INPUT:<3} a file cannot be read: missing, a directory, no permission, not UTF-8
  {EXIT_DATABASE:<3} a database cannot be reached: down, wrong address or password, bad DSN
  {EXIT_PRIVILEGE:<3} a database user lacks a privilege eo needs (`eo audit` names the GRANT)
  {EXIT_MISSING_EXTRA:<3} a part of eo is not installed (the spark or operator extra)
  {EXIT_FENCED:<3} fenced: a newer epoch owns the pipeline (a zombie driver stopping)
  {EXIT_CHECKPOINT_RESET:<3} the checkpoint does not match the decision log
  {EXIT_SINK_CONTRACT:<3} a sink cannot honour the exactly-once contract
  {EXIT_AUDIT_VIOLATION:<3} the audit found a violation, or a saved report no longer matches
  {EXIT_LIFECYCLE_REFUSED:<3} a lifecycle action of the spec refused (a start-over would duplicate)
  {EXIT_INTERRUPTED:<3} interrupted (Ctrl-C)
Add --debug to any command to see the traceback behind a one-line error.
"""


class CliError(Exception):
    """A failure already explained for people, with its exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (libpq's span several)."""
    return " ".join(str(exc).split())


def _distribution() -> str:
    names = metadata.packages_distributions().get(__name__.split(".")[0], [])
    return names[0] if names else "eo"


def _extra_of(module: str) -> str | None:
    """The optional extra of this distribution that installs ``module``, if one does."""
    for requirement in metadata.requires(_distribution()) or []:
        found = re.match(r"\s*([A-Za-z0-9._-]+).*extra\s*==\s*['\"](\w+)['\"]", requirement)
        if found and found.group(1).lower().replace("-", "_") == module.lower():
            return found.group(2)
    return None


def explain(exc: BaseException, command: str, users: Sequence[str] = ()) -> tuple[int, str] | None:
    """(exit code, message) of an ordinary failure of ``eo COMMAND``; None for a bug.

    ``users``: the database users the command logs in as, named when a privilege is missing.
    """
    if isinstance(exc, CliError):
        return exc.code, f"eo: {exc}"
    if isinstance(exc, SpecError):
        return EXIT_INVALID, str(exc)
    if isinstance(exc, InputError):
        return EXIT_NO_INPUT, f"eo: {exc}"
    if isinstance(
        exc, MissingCredentialError | MissingS3CredentialError | MissingKafkaCredentialError
    ):
        return EXIT_USAGE, f"eo: {exc}"
    if isinstance(exc, ModuleNotFoundError):
        extra = _extra_of((exc.name or "").split(".")[0])
        if extra is None:
            return None
        dist = _distribution()
        return EXIT_MISSING_EXTRA, (
            f"eo: eo {command} needs the {extra} extra ({exc.msg}): pip install "
            f"'{dist}[{extra}]' (from a checkout: pip install -e '.[{extra}]')"
        )
    if isinstance(exc, FencedError):
        return EXIT_FENCED, f"eo: {exc}"
    if isinstance(exc, CheckpointResetError | CheckpointMismatchError):
        return EXIT_CHECKPOINT_RESET, f"eo: {exc}"
    if isinstance(exc, ProtocolError | ControlMovedError):
        return EXIT_FAILED, f"eo: {one_line(exc)}"
    return _database(exc, command, users)


def _database(exc: BaseException, command: str, users: Sequence[str]) -> tuple[int, str] | None:
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        who = f" (as database user {', '.join(users)})" if users else ""
        return EXIT_PRIVILEGE, (
            f"eo: {one_line(exc)}{who}: run `eo audit PIPELINE.yaml` to see which GRANT is "
            f"missing, or run eo {command} as a user that has it"
        )
    if isinstance(exc, psycopg.OperationalError):
        return EXIT_DATABASE, (
            f"eo: lost the database: {one_line(exc)}; check that the server is up, then run "
            f"eo {command} again"
        )
    if isinstance(exc, psycopg.Error):
        state = f" (SQLSTATE {exc.sqlstate})" if exc.sqlstate else ""
        return EXIT_FAILED, f"eo: the database refused: {one_line(exc)}{state}"
    if isinstance(exc, pymysql.MySQLError):
        return _mysql(exc, command, users)
    return None


MYSQL_PRIVILEGE = frozenset({1044, 1142, 1143, 1227, 1370})
"""Access denied to a database, a table, a column, or for lack of a privilege or grant."""
MYSQL_UNREACHABLE = frozenset({1040, 1045, 1049, 1053, 2002, 2003, 2005, 2006, 2013, 2055})
"""Too many connections, a refused login, an unknown database, a server shutting down, gone,
or a connection lost: a MySQL/MariaDB control or sink database that cannot be reached."""


def _mysql(exc: pymysql.MySQLError, command: str, users: Sequence[str]) -> tuple[int, str]:
    """A MySQL/MariaDB error (a control database or a sink of that kind) as ``_database``."""
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    text = " ".join(str(exc.args[1] if len(exc.args) > 1 else exc).split())
    if code in MYSQL_PRIVILEGE:
        who = f" (as database user {', '.join(users)})" if users else ""
        return EXIT_PRIVILEGE, (
            f"eo: {text} (MySQL error {code}){who}: run `eo audit PIPELINE.yaml` to see which "
            f"GRANT is missing, or run eo {command} as a user that has it"
        )
    if code in MYSQL_UNREACHABLE:
        return EXIT_DATABASE, (
            f"eo: lost the database: {text} (MySQL error {code}); check that the server is up, "
            f"then run eo {command} again"
        )
    return EXIT_FAILED, f"eo: the database refused: {text} (MySQL error {code})"
