"""A driver pod template may shape the pod, never take over what eo owns; each refusal names
the field and why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from eo_jobs.spec import SpecError, parse_pipeline

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "orders-ledger.yaml"


def _with_template(template: dict[str, Any]) -> dict[str, Any]:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"].setdefault("driver", {})["podTemplate"] = template
    return dict(doc)


def test_a_template_that_shapes_the_pod_is_accepted() -> None:
    template = {
        "metadata": {"labels": {"team": "payments"}, "annotations": {"owner": "ledger"}},
        "spec": {
            "nodeSelector": {"pool": "spark"},
            "tolerations": [{"key": "spark", "operator": "Exists", "effect": "NoSchedule"}],
            "priorityClassName": "payments-high",
            "containers": [
                {"name": "driver", "env": [{"name": "TZ", "value": "UTC"}]},
                {"name": "log-shipper", "image": "fluent-bit:3"},
            ],
            "securityContext": {"runAsNonRoot": True, "supplementalGroups": [2000]},
        },
    }
    pipeline = parse_pipeline(_with_template(template))
    assert pipeline.spec.driver.pod_template is not None


@pytest.mark.parametrize(
    ("template", "path", "why"),
    [
        ({"metadata": {"labels": {"eo.dev/epoch": "9"}}}, "podTemplate.metadata.labels", "eo"),
        ({"spec": {"restartPolicy": "Always"}}, "podTemplate.spec.restartPolicy", "relaunches"),
        (
            {"spec": {"serviceAccountName": "admin"}},
            "podTemplate.spec.serviceAccountName",
            "spec.driver.serviceAccount",
        ),
        ({"spec": {"hostNetwork": True}}, "podTemplate.spec.hostNetwork", "Service"),
        (
            {"spec": {"containers": [{"name": "driver", "command": ["sh"]}]}},
            "podTemplate.spec.containers[0].command",
            "eo run",
        ),
        (
            {"spec": {"containers": [{"name": "driver", "image": "mine:1"}]}},
            "podTemplate.spec.containers[0].image",
            "spec.driver.image",
        ),
        (
            {"spec": {"containers": [{"name": "driver", "env": [{"name": "EO_EPOCH"}]}]}},
            "podTemplate.spec.containers[0].env[0].name",
            "set by eo",
        ),
        (
            {"spec": {"securityContext": {"runAsUser": 0}}},
            "podTemplate.spec.securityContext.runAsUser",
            "non-root",
        ),
        (
            {"spec": {"containers": [{"name": "x", "securityContext": {"privileged": True}}]}},
            "podTemplate.spec.containers[0].securityContext.privileged",
            "privileged",
        ),
        (
            {"spec": {"volumes": [{"name": "tmp", "emptyDir": {}}]}},
            "podTemplate.spec.volumes[0].name",
            "eo's volume",
        ),
    ],
)
def test_what_eo_owns_is_refused_naming_the_field(
    template: dict[str, Any], path: str, why: str
) -> None:
    with pytest.raises(SpecError) as caught:
        parse_pipeline(_with_template(template))
    message = str(caught.value)
    assert f"spec.driver.{path}" in message and why in message, message
