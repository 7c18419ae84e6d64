"""The operator refuses executors that could not read the files source, naming the field."""

from __future__ import annotations

from typing import Any

from eo_operator.reconciler import parse


def _doc(path: str, **driver: Any) -> dict[str, Any]:
    return {
        "apiVersion": "eo.dev/v1alpha1",
        "kind": "ExactlyOncePipeline",
        "metadata": {"name": "orders", "namespace": "pay", "uid": "u-1"},
        "spec": {
            "source": {"files": {"path": path, "format": "json", "schema": "id BIGINT"}},
            "sinks": [
                {
                    "name": "ledger",
                    "postgres": {
                        "dsn": {"secretKeyRef": {"name": "db", "key": "dsn"}},
                        "table": "public.t",
                    },
                }
            ],
            "checkpoint": {"location": "/data/ckpt"},
            "driver": driver,
            "executors": {"instances": 2},
        },
    }


def test_a_files_source_only_the_driver_has_is_refused_with_the_field_and_the_fix() -> None:
    pipeline, reason = parse(_doc("/srv/in", volumeClaim="orders-data"))
    assert pipeline is None and reason is not None
    assert reason.startswith("spec.source.files.path: /srv/in is on no volume of the executor")
    assert "driver.volumeMountPath (/data)" in reason and "executors.instances: 0" in reason


def test_a_files_source_on_the_claim_executors_mount_is_accepted() -> None:
    pipeline, reason = parse(_doc("/data/in", volumeClaim="orders-data"))
    assert reason is None and pipeline is not None
