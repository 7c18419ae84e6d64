"""The chart works as a dependency of an umbrella chart that sets global values."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import helm_python
import yaml

from tests.chart.helm import CHART

UMBRELLA_GLOBALS: dict[str, Any] = {
    "imageRegistry": "registry.platform.example",
    "imagePullSecrets": [{"name": "platform-pull"}],
    # Keys that other subcharts of the umbrella read: Helm hands them to every subchart.
    "storageClass": "fast",
    "postgresql": {"auth": {"existingSecret": "pg"}},
}


def _umbrella(root: Path) -> Path:
    umbrella = root / "platform"
    (umbrella / "charts").mkdir(parents=True)
    shutil.copytree(CHART, umbrella / "charts" / "eo")
    (umbrella / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": "platform",
                "version": "1.0.0",
                "dependencies": [{"name": "eo", "version": "0.1.0"}],
            }
        )
    )
    (umbrella / "values.yaml").write_text(yaml.safe_dump({"global": UMBRELLA_GLOBALS}))
    return umbrella


def test_an_umbrella_chart_with_its_own_globals_renders_eo_with_the_global_registry(
    tmp_path: Path,
) -> None:
    with helm_python.Chart.load(_umbrella(tmp_path)) as chart:
        rendered = chart.render(None, name="platform", namespace="platform", is_install=True)
    objects = [
        doc
        for path, text in rendered.items()
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    assert spec["containers"][0]["image"] == "registry.platform.example/eo-operator:0.1.0"
    assert spec["imagePullSecrets"] == [{"name": "platform-pull"}]
