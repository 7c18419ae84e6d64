"""A pipeline with a driver pod template, on the real control plane: the API server takes it,
the operator's driver pod carries what the template adds, and the pipeline stays exact."""

from __future__ import annotations

import pytest

from tests.operator.cluster_env import Scene

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_a_driver_pod_template_shapes_the_pod_and_the_pipeline_stays_exact(scene: Scene) -> None:
    template = {
        "metadata": {"labels": {"team": "payments"}, "annotations": {"owner": "ledger-team"}},
        "spec": {
            "tolerations": [{"key": "spark", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "driver", "env": [{"name": "LEDGER_REGION", "value": "eu"}]}],
        },
    }
    scene.add_files(3)
    scene.apply(driver={"cores": 1, "memory": "768m", "podTemplate": template})
    pod = scene.until("a running driver", scene.running_driver)

    assert pod["metadata"]["labels"]["team"] == "payments"
    assert pod["metadata"]["annotations"]["owner"] == "ledger-team"
    assert "spark" in [t.get("key") for t in pod["spec"]["tolerations"]]
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["LEDGER_REGION"] == "eu" and "EO_PIPELINE_SPEC" in env
    scene.until("all records delivered", scene.all_delivered)
    audit = scene.audit()
    assert (audit.duplicates, audit.missing, audit.prepared_left) == (0, 0, 0)


def test_a_template_taking_an_eo_label_is_refused_by_the_api_server(scene: Scene) -> None:
    template = {"metadata": {"labels": {"eo.dev/epoch": "99"}}}
    with pytest.raises(RuntimeError, match=r"eo\.dev/\* labels"):
        scene.apply(driver={"cores": 1, "memory": "768m", "podTemplate": template})
