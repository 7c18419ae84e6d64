"""File reader options eo sets itself cannot be set through spec.source.files.options.

eo's reader applied the user's options first and its own after them, and Spark reads option
names in any case: ``mode: DROPMALFORMED`` was overridden without a word (the user believes
malformed records are dropped; eo dead-letters them), ``header: "false"`` too (the first record
of every headerless csv file would be taken for a header and lost), and ``path`` fought the
field of the same name. They are refused, naming the field to use.
"""

from __future__ import annotations

from typing import Any

import pytest

from eo_jobs.spec import parse_pipeline
from tests.support.pipelines import document
from tests.support.pipelines import problems as _problems


def _files(**fields: Any) -> dict[str, Any]:
    source = {"path": "/data/in", "format": "csv", "schema": "id BIGINT", **fields}
    return document(source={"files": source})


@pytest.mark.parametrize(
    ("key", "fix"),
    [
        ("mode", "DROPMALFORMED would drop it, a gap"),
        ("MODE", "DROPMALFORMED would drop it, a gap"),
        ("columnNameOfCorruptRecord", "dead-letter table"),
        ("header", "taken for a header and lost"),
        ("maxFilesPerTrigger", "spec.source.files.maxFilesPerTrigger"),
        ("path", "spec.source.files.path"),
    ],
)
def test_an_option_eo_sets_itself_is_refused_naming_the_field_to_use(key: str, fix: str) -> None:
    message = _problems(_files(options={key: "x"}))["spec.source.files.options"]
    assert f"key {key} is set by eo" in message
    assert fix in message


def test_other_reader_options_are_kept() -> None:
    options = {"multiLine": "true", "timestampFormat": "yyyy-MM-dd HH:mm:ss", "sep": ";"}
    pipeline = parse_pipeline(_files(options=options))
    assert pipeline.spec.source.files is not None
    assert pipeline.spec.source.files.options == options


def test_more_options_than_the_schema_allows_are_refused() -> None:
    options = {f"option{i}": "x" for i in range(33)}
    assert "spec.source.files.options" in _problems(_files(options=options))
