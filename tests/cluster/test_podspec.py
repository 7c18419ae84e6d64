"""Pure rules of the process kubelet: variable expansion, exit codes, supported specs."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import V1Pod

from tests.cluster.podenv import expand, field_value
from tests.cluster.podspec import UnsupportedPodError, check_supported
from tests.cluster.podstatus import Exit


def _pod(**spec: Any) -> V1Pod:
    container = {"name": "main", "image": "x", "command": ["eo"], **spec.pop("container", {})}
    return V1Pod.model_validate(
        {
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "a"}},
            "spec": {"restartPolicy": "Never", "containers": [container], **spec},
        }
    )


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        ("$(A)-$(B)", "1-2"),
        ("$(MISSING) stays", "$(MISSING) stays"),
        ("$$(A) is escaped", "$(A) is escaped"),
        ("cost $$5", "cost $5"),
        ("unclosed $(A", "unclosed $(A"),
    ],
)
def test_variable_references_expand_like_the_kubelet(text: str, expanded: str) -> None:
    assert expand(text, {"A": "1", "B": "2"}) == expanded


def test_a_signal_death_reports_128_plus_the_signal() -> None:
    assert Exit.from_returncode(-15) == Exit(143, "Error")
    assert Exit.from_returncode(0) == Exit(0, "Completed")


def test_a_missing_label_reads_as_empty_like_the_downward_api() -> None:
    assert field_value(_pod(), "metadata.labels['app']") == "a"
    assert field_value(_pod(), "metadata.labels['nope']") == ""


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"restartPolicy": "Always"}, "UnsupportedRestartPolicy"),
        ({"container": {"command": None, "args": ["x"]}}, "NoCommand"),
        ({"volumes": [{"name": "v", "hostPath": {"path": "/"}}]}, "UnsupportedVolume"),
        ({"initContainers": [{"name": "i", "image": "x"}]}, "UnsupportedInitContainers"),
        (
            {
                "container": {
                    "env": [
                        {
                            "name": "M",
                            "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}},
                        }
                    ]
                }
            },
            "UnsupportedEnv",
        ),
    ],
)
def test_what_cannot_run_as_a_process_is_refused_with_a_reason(
    spec: dict[str, Any], reason: str
) -> None:
    with pytest.raises(UnsupportedPodError) as refused:
        check_supported(_pod(**spec))
    assert refused.value.reason == reason


def test_empty_dir_and_the_injected_api_access_volume_are_accepted() -> None:
    check_supported(
        _pod(
            volumes=[
                {"name": "scratch", "emptyDir": {}},
                {
                    "name": "kube-api-access-abcde",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                            {
                                "downwardAPI": {
                                    "items": [
                                        {
                                            "path": "namespace",
                                            "fieldRef": {"fieldPath": "metadata.namespace"},
                                        }
                                    ]
                                }
                            },
                        ]
                    },
                },
            ]
        )
    )
