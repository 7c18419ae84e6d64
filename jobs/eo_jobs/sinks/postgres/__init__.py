"""PostgreSQL sink: COPY or upsert inside a prepared transaction, and contract checks."""

from eo_jobs.sinks.postgres.contract import ContractProblem, check_contract
from eo_jobs.sinks.postgres.credentials import resolve_dsn
from eo_jobs.sinks.postgres.writer import PostgresWriter

__all__ = ["ContractProblem", "PostgresWriter", "check_contract", "resolve_dsn"]
