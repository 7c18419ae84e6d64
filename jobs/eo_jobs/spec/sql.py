"""The transform's SQL and the source's schema, checked without Spark (sqlglot's Spark dialect).

The driver compiles both only when it starts in the cluster; a typo there fails every launch
until the restart budget is spent. These checks catch the usual mistakes first: a schema that
is not Spark DDL, SQL that does not parse, a statement that is not one query, a table other
than the view ``source``, and a column the declared schema does not have.
"""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError
from sqlglot.optimizer.qualify import qualify

from eo_jobs.spec.documents import SpecProblem
from eo_jobs.spec.models import PipelineSpec

DIALECT = "spark"
SOURCE_VIEW = "source"
"""The view the transform reads: the parsed input records."""
SCHEMA_EXAMPLE = 'write name TYPE pairs, e.g. "order_id BIGINT, merchant STRING"'
_UNRESOLVED = re.compile(r"Column '([^']+)' could not be resolved")


class SchemaError(ValueError):
    """A source schema that is not a Spark DDL list of columns."""


def _near(error: ParseError) -> str:
    first = error.errors[0] if error.errors else {}
    return f"{first.get('description', error)} near {first.get('highlight', '')!r}"


def schema_columns(ddl: str) -> dict[str, str]:
    """Column name -> Spark type of a DDL schema such as ``"id BIGINT, name STRING"``."""
    try:
        statements = sqlglot.parse(f"CREATE TABLE t ({ddl})", read=DIALECT)
    except ParseError as exc:
        raise SchemaError(_near(exc)) from None
    create = statements[0] if len(statements) == 1 else None
    if not isinstance(create, exp.Create) or not isinstance(create.this, exp.Schema):
        raise SchemaError("not a list of columns")
    if create.expression is not None:
        raise SchemaError("text after the column list")
    columns: dict[str, str] = {}
    for column in create.this.expressions:
        kind = column.args.get("kind")
        if not isinstance(column, exp.ColumnDef) or kind is None:
            raise SchemaError(f"column {column.name} has no type")
        columns[column.name] = kind.sql(DIALECT)
    return columns


def _schema_path(spec: PipelineSpec) -> tuple[str, str]:
    source = spec.source
    if source.files is not None:
        return "spec.source.files.schema", source.files.schema_
    assert source.kafka is not None  # the model allows exactly one source
    return "spec.source.kafka.schema", source.kafka.schema_


def problems(spec: PipelineSpec) -> list[SpecProblem]:
    """What is wrong with the source schema and the transform SQL of ``spec``."""
    schema_path, ddl = _schema_path(spec)
    try:
        columns = schema_columns(ddl)
    except SchemaError as exc:
        return [SpecProblem(schema_path, f"not a Spark DDL schema ({exc}); {SCHEMA_EXAMPLE}")]
    if spec.transform is None:
        return []
    found = _query_problem(spec.transform.sql, columns, schema_path)
    return [SpecProblem("spec.transform.sql", found)] if found else []


def _query_problem(sql: str, columns: dict[str, str], schema_path: str) -> str | None:
    try:
        statements = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        return (
            f"does not parse as Spark SQL: {_near(exc)} (line {first.get('line')}, column "
            f"{first.get('col')}); fix the query"
        )
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        got = (
            f"{len(statements)} statements"
            if len(statements) != 1
            else f"a {statements[0].key.upper()} statement"
        )
        return f"must be one SELECT query over the view {SOURCE_VIEW}; got {got}"
    query = statements[0]
    ctes = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}
    for table in query.find_all(exp.Table):
        name = table.name.lower()
        if name and name not in ctes and (name != SOURCE_VIEW or table.db):
            return (
                f"reads table {table.sql(DIALECT)}; the transform can only read the view named "
                f"{SOURCE_VIEW} (the parsed input records)"
            )
    try:
        qualify(
            query,
            schema={SOURCE_VIEW: columns},
            dialect=DIALECT,
            validate_qualify_columns=True,
        )
    except SqlglotError as exc:
        declared = ", ".join(columns)
        missing = _UNRESOLVED.search(str(exc))
        if missing:
            return (
                f"column {missing.group(1)} is not in the source schema ({schema_path} "
                f"declares {declared}); fix the name or declare the column"
            )
        return f"does not fit the source schema ({schema_path} declares {declared}): {exc}"
    return None
