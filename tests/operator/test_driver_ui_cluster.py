"""The Spark UI of a running driver, on the real control plane: on by default, at the port its
container and Service declare, answering HTTP at the pod's IP. Real operator, real Spark."""

from __future__ import annotations

import json
import re
import urllib.request
from typing import Any

import pytest

from tests.operator.cluster_env import Scene

pytestmark = [pytest.mark.spark, pytest.mark.slow]

UI_PORT = 4040


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def test_a_running_drivers_spark_ui_answers_at_its_pod_ip_on_the_service_port(
    scene: Scene,
) -> None:
    scene.add_files(2)
    scene.apply()
    driver = scene.until("a running driver", scene.running_driver)
    name, pod_ip = driver["metadata"]["name"], driver["status"]["podIP"]
    ports = {p["name"]: p["containerPort"] for p in driver["spec"]["containers"][0]["ports"]}
    assert ports["ui"] == UI_PORT
    services = json.loads(
        scene.cluster.kubectl(
            "get", "svc", "-n", scene.namespace, "-l", f"eo.dev/pipeline={scene.name}", "-o", "json"
        ).stdout
    )["items"]
    assert [p["port"] for s in services for p in s["spec"]["ports"] if p["name"] == "ui"] == [
        UI_PORT
    ]

    logged = scene.until(
        "the driver logs its Spark UI",
        lambda: re.search(
            r"Spark UI at http://([^:/\s]+):(\d+)",
            scene.cluster.kubelet.logs(scene.namespace, name),
        ),
    )
    # The process kubelet runs every pod in the host's network namespace, where other Spark
    # processes of this machine may hold 4040 (Spark then binds the next free port and says
    # so); a real pod has 4040 to itself. So: the UI answers at the pod's IP on the port it
    # logged, and its configuration pins the port the container and Service declare.
    host, port = logged.group(1), int(logged.group(2))
    assert host == pod_ip, logged.group(0)
    base = f"http://{pod_ip}:{port}"
    apps = scene.until(
        "the UI's REST API answers", lambda: _get(f"{base}/api/v1/applications"), timeout=60
    )
    assert [app["name"] for app in apps] == [f"eo-{scene.namespace}-{scene.name}"]
    app = f"{base}/api/v1/applications/{apps[0]['id']}"
    properties = dict(_get(f"{app}/environment")["sparkProperties"])
    assert properties["spark.ui.port"] == str(UI_PORT)
    assert properties["spark.ui.killEnabled"] == "false"
    jobs = scene.until("the driver's batches as jobs on the UI", lambda: _get(f"{app}/jobs"))
    assert jobs
    with urllib.request.urlopen(f"{base}/StreamingQuery/", timeout=5) as page:
        assert page.status == 200
        assert scene.name in page.read().decode()
    scene.until("all records delivered", scene.all_delivered)
