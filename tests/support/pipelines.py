"""Small pipelines for spec and command-line tests: as YAML text and as decoded documents."""

from __future__ import annotations

from typing import Any

import pytest

from eo_jobs.spec import SpecError, parse_pipeline

LOCAL_YAML = """\
apiVersion: eo.dev/v1alpha1
kind: ExactlyOncePipeline
metadata: {name: ledger, namespace: default}
spec:
  source: {files: {path: /in, format: json, schema: "id BIGINT"}}
  sinks: [{name: ledger, postgres: {dsn: {env: LEDGER_DSN}, table: public.ledger}}]
  checkpoint: {location: /ckpt}
"""
"""``default/ledger`` for a local run: its DSN from ``$LEDGER_DSN``."""


def document(metadata: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    """A minimal valid pipeline ``pay/p``; keyword arguments replace fields of its spec."""
    base: dict[str, Any] = {
        "source": {"files": {"path": "/in", "format": "json", "schema": "id BIGINT"}},
        "sinks": [{"name": "ledger", "postgres": {"dsn": {"env": "PG"}, "table": "public.t"}}],
        "checkpoint": {"location": "/ckpt"},
    }
    base.update(spec)
    return {
        "apiVersion": "eo.dev/v1alpha1",
        "kind": "ExactlyOncePipeline",
        "metadata": metadata or {"name": "p", "namespace": "pay"},
        "spec": base,
    }


def problems(doc: dict[str, Any]) -> dict[str, str]:
    """Field path -> message of every problem of an invalid document."""
    with pytest.raises(SpecError) as caught:
        parse_pipeline(doc)
    return {p.path: p.message for p in caught.value.problems}
