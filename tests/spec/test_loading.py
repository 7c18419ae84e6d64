"""Reading a pipeline file: one document, no duplicate keys, types as the API server sees them."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from eo_jobs.spec import InputError, SpecError, load_pipeline

PIPELINE = """\
apiVersion: eo.dev/v1alpha1
kind: ExactlyOncePipeline
metadata:
  name: ledger
  namespace: default
spec:
  source: {files: {path: /in, format: json, schema: "id BIGINT"}}
  sinks:
    - name: ledger
      postgres:
        dsn: {env: PG}
        table: public.ledger
        mode: append
  checkpoint: {location: /ckpt}
"""


def _problems(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        load_pipeline(path)
    assert str(path) in str(caught.value)
    return {p.path: p.message for p in caught.value.problems}


def test_a_duplicate_key_is_refused_with_its_path_and_both_lines(tmp_path: Path) -> None:
    text = PIPELINE.replace("mode: append", "mode: append\n        mode: upsert")
    problems = _problems(tmp_path, text)
    message = problems["spec.sinks[0].postgres.mode"]
    assert "duplicate key" in message and "lines 13 and 14" in message
    assert "remove one" in message


def test_a_duplicate_top_level_key_is_refused(tmp_path: Path) -> None:
    problems = _problems(tmp_path, PIPELINE + "spec: {}\n")
    assert "duplicate key" in problems["spec"]


def test_a_second_document_is_refused_with_its_line(tmp_path: Path) -> None:
    problems = _problems(tmp_path, PIPELINE + "---\n" + PIPELINE)
    message = problems["(file)"]
    assert "2 YAML documents" in message and "line 16" in message
    assert "one pipeline per file" in message


def test_an_empty_second_document_is_not_a_second_pipeline(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("---\n" + PIPELINE + "---\n")
    assert load_pipeline(path).key == "default/ledger"


def test_a_document_of_another_kind_is_named(tmp_path: Path) -> None:
    problems = _problems(tmp_path, "apiVersion: v1\nkind: Secret\nmetadata: {name: x}\n")
    assert "'Secret'" in problems["kind"] and "ExactlyOncePipeline" in problems["kind"]


def test_a_kubectl_list_points_at_getting_one_pipeline(tmp_path: Path) -> None:
    problems = _problems(tmp_path, "apiVersion: v1\nkind: List\nitems: []\n")
    assert "kubectl get eop NAME -o yaml" in problems["kind"]


def test_an_empty_file_says_it_is_empty(tmp_path: Path) -> None:
    assert "empty" in _problems(tmp_path, "# nothing\n")["(file)"]


def test_a_date_looking_value_stays_text(tmp_path: Path) -> None:
    text = PIPELINE.replace(
        "namespace: default", "namespace: default\n  labels: {since: 2024-01-01}"
    )
    path = tmp_path / "p.yaml"
    path.write_text(text)
    assert load_pipeline(path).metadata.labels == {"since": "2024-01-01"}


def test_dash_reads_standard_input(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(PIPELINE.encode())))
    assert load_pipeline("-").key == "default/ledger"


def test_a_missing_file_is_an_input_error_not_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_pipeline(tmp_path / "nope.yaml")


def test_broken_yaml_is_one_line_with_its_position(tmp_path: Path) -> None:
    message = _problems(tmp_path, PIPELINE.replace("mode: append", "mode: [append"))["(file)"]
    assert message.startswith("not valid YAML at line 14, column 13: while parsing a flow")
    assert "\n" not in message


def test_a_character_yaml_does_not_allow_is_one_line(tmp_path: Path) -> None:
    message = _problems(tmp_path, PIPELINE.replace("ledger\n", "led\x00ger\n", 1))["(file)"]
    assert message.startswith("not valid YAML: unacceptable character #x0000")
    assert "\n" not in message
