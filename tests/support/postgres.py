"""PostgreSQL queries the tests share."""

from __future__ import annotations

PREPARED_HERE = "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
"""This database's prepared transactions. The test server is shared by the test workers (one
database per test) and ``pg_prepared_xacts`` lists every database's: unfiltered, a test sees
another test's prepared transactions (the CI run of 0d060c8 failed six tests that way)."""
