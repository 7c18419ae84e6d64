"""What stops a pipeline from starting, told to people without leaking a secret.

A recovery or a launch that fails because of the environment (a Secret or key missing, a DSN
that does not parse, a database that does not answer or refuses the password, a driver
ServiceAccount missing, a pod create refused) is not a bug to retry silently: it becomes a
``Blocker`` with a condition, a CamelCase reason, a message and the fix, which the reconciler
records (condition, Warning event) and the planner turns into the Failed phase after a bounded
time. Anything else is not classified and propagates as before.

Messages never carry secret text: libpq's connection-string parse errors quote the offending
token (``missing "=" after "<token>"``), which may be part of a password, so a DSN that does not
parse is reported without the parser's words, and every other message is scrubbed of
``password=...`` and ``user:password@`` forms.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import psycopg
import pymysql
from kubernetes.client.exceptions import ApiException

from eo_jobs.protocol.control import ForeignFenceOwnerError
from eo_jobs.protocol.mysql_xa import error_code
from eo_operator.planner import DRIVER_CREATABLE, FOREIGN_FENCE_OWNER

SINK = "SinkReachable"
"""Condition for what stands between the operator and the sink databases."""
DRIVER = DRIVER_CREATABLE
"""Condition for what stands between the operator and a driver pod."""
FENCE = "FenceOwned"
"""Condition for another writer owning the pipeline's sink fence (``fence_owner``)."""
REASONS = frozenset(
    {
        FOREIGN_FENCE_OWNER,
        "SecretMissing",
        "SecretKeyMissing",
        "SecretForbidden",
        "DsnInvalid",
        "SinkUnreachable",
        "SinkAuthFailed",
        "ServiceAccountMissing",
        "PodForbidden",
    }
)
"""Every reason a Blocker can carry (the runbook has an entry for each)."""

_PASSWORD = re.compile(r"(password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)
_USERINFO = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


@dataclass(frozen=True)
class Blocker:
    """Why a pipeline cannot start, for its condition and Warning event."""

    condition: str
    reason: str
    message: str
    fix: str

    @property
    def text(self) -> str:
        """The event message: what is wrong, then what to do."""
        return f"{self.message}. Fix: {self.fix}"


class SecretKeyMissingError(KeyError):
    """The Secret a credential reference names exists but lacks the key."""

    def __init__(self, namespace: str, name: str, key: str) -> None:
        super().__init__(f"Secret {namespace}/{name} has no key {key!r}")
        self.namespace, self.name, self.key = namespace, name, key


def redact(text: str) -> str:
    """``text`` without the password forms a connection string can hold."""
    return _USERINFO.sub(r"\1***@", _PASSWORD.sub(r"\1***", text))


def safe_message(exc: BaseException) -> str:
    """An exception's first line for status or an event, never quoting a connection string."""
    if _is_dsn_parse_error(exc):
        return "the connection string does not parse (the parser's words are not shown)"
    text = str(exc).strip()
    return redact(text.splitlines()[0] if text else type(exc).__name__)[:500]


def _is_dsn_parse_error(exc: BaseException) -> bool:
    """libpq refused the connection string itself (its message quotes the offending part: a
    token, a value, or the whole URI with its password)."""
    text = str(exc)
    return (
        isinstance(exc, psycopg.Error)
        and exc.sqlstate is None
        and any(marker in text for marker in _PARSE_MARKERS)
    )


_PARSE_MARKERS = (
    "connection info string",
    "invalid dsn",
    "invalid connection option",
    "in URI",
    "invalid integer value",
    "invalid value for",
    'missing "="',
    "unterminated quoted string",
)


def classify(exc: BaseException, namespace: str) -> Blocker | None:
    """The Blocker an exception from a recovery or a launch stands for, or None."""
    if isinstance(exc, ForeignFenceOwnerError):
        return _foreign_owner(exc)
    if isinstance(exc, SecretKeyMissingError):
        return Blocker(
            SINK,
            "SecretKeyMissing",
            f"Secret {exc.namespace}/{exc.name} has no key {exc.key!r}",
            f"add the key: kubectl -n {exc.namespace} patch secret {exc.name} --type merge "
            f'-p \'{{"stringData": {{"{exc.key}": "<dsn>"}}}}\', or correct secretKeyRef.key',
        )
    if _is_dsn_parse_error(exc):
        return Blocker(
            SINK,
            "DsnInvalid",
            "a sink's DSN Secret holds a value that is not a PostgreSQL connection string "
            "(not shown: it may quote the password)",
            "store a libpq DSN ('host=... dbname=... user=... password=...' or "
            "'postgresql://user:password@host:5432/db') in the Secret key secretKeyRef names",
        )
    if isinstance(exc, psycopg.OperationalError):
        return _database(exc)
    if isinstance(exc, pymysql.OperationalError):
        return _mysql(exc)
    if isinstance(exc, ApiException):
        return _api(exc, namespace)
    return None


def _foreign_owner(exc: ForeignFenceOwnerError) -> Blocker:
    """Another writer of this pipeline (its object in another cluster, a restored copy, a
    manual run) owns the sink fence: wait for a person to hand it over."""
    namespace, _, name = exc.pipeline.partition("/")
    return Blocker(
        FENCE,
        FOREIGN_FENCE_OWNER,
        f"the sink fence of {exc.pipeline} (epoch {exc.fence}) is owned by {exc.owner}, "
        "another writer of this pipeline on the same database (its object in another "
        f"cluster, a restored copy, a manual eo run), not by this object ({exc.claimant}): "
        "waiting, no driver is launched. Hand over once that writer is stopped: kubectl -n "
        f"{namespace} annotate eop {name} eo.dev/adopt-fence={exc.owner}",
        "stop the other writer for good first (suspend or delete its object there: a deletion "
        "releases the fence, and this object then starts by itself); the annotation, or "
        f"`eo release-fence PIPELINE.yaml --owner {exc.owner}`, hands the fence over and this "
        "object runs above the other's epoch",
    )


def _database(exc: psycopg.OperationalError) -> Blocker | None:
    state = exc.sqlstate or ""
    message = safe_message(exc)
    # A refused login has no SQLSTATE on the client side (libpq reports it as the connection
    # failure's text), so the server's words decide.
    refused = any(words in message for words in _LOGIN_REFUSED) or _UNKNOWN_ROLE.search(message)
    if state.startswith("28") or refused:
        return Blocker(
            SINK,
            "SinkAuthFailed",
            f"the sink database refused the credentials: {message}",
            "correct the user/password in the DSN Secret (the operator reads it on every "
            "retry), or grant the user LOGIN and CONNECT",
        )
    if state == "" or state.startswith("08") or state in ("3D000", "57P03"):
        return Blocker(
            SINK,
            "SinkUnreachable",
            f"the sink database does not answer: {message}",
            "check the host, port and dbname in the DSN Secret, that PostgreSQL runs, and "
            "that a NetworkPolicy lets the operator's namespace reach it",
        )
    return None  # a lock timeout, a query error: not the environment, retried as before


MYSQL_LOGIN_REFUSED = frozenset({1044, 1045, 1698, 1251})
"""Access denied to the database / for the user, auth plugin refusals."""
MYSQL_UNREACHABLE = frozenset({1049, 2002, 2003, 2005, 2006, 2013, 1040, 1053})
"""Unknown database, cannot connect, unknown host, gone away, lost, too many connections,
server shutting down."""


def _mysql(exc: pymysql.OperationalError) -> Blocker | None:
    """A MySQL/MariaDB sink's connection failure, by the server's or the client's error code."""
    code = error_code(exc)
    message = safe_message(exc)
    if code in MYSQL_LOGIN_REFUSED:
        return Blocker(
            SINK,
            "SinkAuthFailed",
            f"the sink database refused the credentials: {message}",
            "correct the user/password in the DSN Secret (the operator reads it on every "
            "retry), or GRANT the user its privileges on the sink's database",
        )
    if code in MYSQL_UNREACHABLE:
        return Blocker(
            SINK,
            "SinkUnreachable",
            f"the sink database does not answer: {message}",
            "check the host, port and database in the DSN Secret (mysql://user:password@host:"
            "3306/database), that MySQL/MariaDB runs, and that a NetworkPolicy lets the "
            "operator's namespace reach it",
        )
    return None


_LOGIN_REFUSED = (
    "authentication failed",
    "is not permitted to log in",
    "no pg_hba.conf entry",
    "permission denied for database",
)
_UNKNOWN_ROLE = re.compile(r'FATAL:\s+role "[^"]*" does not exist')


def _api(exc: ApiException, namespace: str) -> Blocker | None:
    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        body = {}
    details = body.get("details") or {}
    said = redact(str(body.get("message") or exc.reason or ""))[:500]
    if exc.status == 404 and details.get("kind") == "secrets":
        name = details.get("name", "?")
        return Blocker(
            SINK,
            "SecretMissing",
            f"Secret {namespace}/{name} named by a sink's secretKeyRef does not exist",
            f"create it: kubectl -n {namespace} create secret generic {name} "
            "--from-literal=<key>=<dsn>, or correct secretKeyRef.name",
        )
    if exc.status == 403 and details.get("kind") == "secrets":
        return Blocker(
            SINK,
            "SecretForbidden",
            f"the operator may not read the sink's Secret: {said}",
            f"install the chart with namespace {namespace} among the watched namespaces "
            "(its Role grants get on secrets)",
        )
    if exc.status == 403 and "service account" in said and "not found" in said:
        return Blocker(
            DRIVER,
            "ServiceAccountMissing",
            f"the driver pod was refused: {said}",
            f"create the ServiceAccount in {namespace} (the chart's driver.namespaces does, "
            "with its Role), or set spec.driver.serviceAccount to an existing one",
        )
    if exc.status == 403:
        return Blocker(
            DRIVER,
            "PodForbidden",
            f"the API server refused a driver object: {said}",
            "grant the operator's ServiceAccount create on pods, services and configmaps in "
            f"{namespace} (add it to the chart's watched namespaces), or lift the admission "
            "policy or quota that refuses it",
        )
    return None
