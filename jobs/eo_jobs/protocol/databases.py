"""Which database kind a DSN names, and its ``ParticipantStore``: the one place that knows.

* ``postgresql://`` / ``postgres://`` URLs and libpq ``key=value`` strings: PostgreSQL
  (``protocol.xa.PreparedTransactions``);
* ``mysql://`` / ``mariadb://`` URLs: MySQL or MariaDB (``protocol.mysql_xa``).

The same kinds can hold the control tables (``control_store``: ``protocol.control`` or
``protocol.mysql_control``). A new database kind adds its scheme to ``KINDS`` and a branch to
``participant_store`` and ``control_store``.
"""

from __future__ import annotations

import re
from typing import Literal

from eo_jobs.protocol.control import ControlStore
from eo_jobs.protocol.control_api import ControlDatabase
from eo_jobs.protocol.mysql_control import MySqlControlStore
from eo_jobs.protocol.mysql_xa import MySqlPreparedTransactions
from eo_jobs.protocol.participants import ParticipantStore
from eo_jobs.protocol.xa import PreparedTransactions

Kind = Literal["postgresql", "mysql"]
KINDS: dict[str, Kind] = {
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "mysql": "mysql",
    "mariadb": "mysql",
}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def kind(dsn: str) -> Kind:
    """The database kind of ``dsn``; a string without ``scheme://`` is a libpq conninfo."""
    found = _SCHEME.match(dsn.strip())
    if found is None:
        return "postgresql"
    scheme = found.group(1).lower()
    if scheme not in KINDS:
        raise ValueError(
            f"unknown database scheme {scheme}://; known: " + ", ".join(f"{s}://" for s in KINDS)
        )
    return KINDS[scheme]


def participant_store(dsn: str) -> ParticipantStore:
    """The prepared-transaction store of the sink database ``dsn`` names."""
    if kind(dsn) == "mysql":
        return MySqlPreparedTransactions(dsn)
    return PreparedTransactions(dsn)


def control_store(dsn: str) -> ControlDatabase:
    """The control store (fence, decision log, registry) of the database ``dsn`` names."""
    if kind(dsn) == "mysql":
        return MySqlControlStore(dsn)
    return ControlStore(dsn)
