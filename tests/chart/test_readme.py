"""The chart README is generated from values.yaml and is what `helm show readme` prints."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import helm_python
import pytest

from tests.chart.helm import CHART, ROOT
from tests.scripts import load_script

VALUES_TEXT = (CHART / "values.yaml").read_text()


generator = load_script("generate_chart_readme")


def test_the_committed_readme_is_the_generated_one() -> None:
    assert (CHART / "README.md").read_text() == generator.readme(ROOT), (
        "charts/eo/README.md drifted: run scripts/generate_chart_readme.py"
    )


def test_helm_show_readme_prints_the_values_table() -> None:
    shown = helm_python.show(str(CHART), output_format="readme")
    assert "| Key | Type | Default | Description |" in shown
    assert "| monitoring.runbookBaseUrl | string |" in shown


def test_every_documented_value_has_one_row_with_its_type_and_default() -> None:
    rows = {row.key: row for row in generator.rows(VALUES_TEXT)}
    assert len(rows) == len(re.findall(r"^\s*# -- ", VALUES_TEXT, flags=re.MULTILINE))
    assert (rows["operator.replicaCount"].type, rows["operator.replicaCount"].default) == (
        "int",
        "1",
    )
    assert rows["operator.securityContext.capabilities.drop"].default == '["ALL"]'
    assert rows["monitoring.alertThresholds.preparedTransactionsMaxRatio"].type == "float"
    assert rows["global.imageRegistry"].default == '""'


def test_a_multi_line_comment_becomes_one_description() -> None:
    rows = {row.key: row for row in generator.rows(VALUES_TEXT)}
    description = rows["operator.watchNamespaces"].description
    assert description.startswith("Namespaces whose pipelines the operator watches. Empty means")
    assert "namespaces must exist before the install)." in description
    assert "#" not in description


def test_check_mode_fails_on_a_stale_readme(tmp_path: Path) -> None:
    chart = tmp_path / "charts" / "eo"
    shutil.copytree(CHART, chart)
    (chart / "values.yaml").write_text(
        VALUES_TEXT.replace("# -- Operator image pull policy.", "# -- How to pull.")
    )
    assert generator.main(["--check", "--root", str(tmp_path)]) == 1
    assert generator.main(["--root", str(tmp_path)]) == 0
    assert "| How to pull. |" in (chart / "README.md").read_text()


def test_a_template_without_the_table_marker_is_refused(tmp_path: Path) -> None:
    chart = tmp_path / "charts" / "eo"
    shutil.copytree(CHART, chart)
    (chart / "README.tmpl.md").write_text("# eo\n")
    with pytest.raises(ValueError, match="values table"):
        generator.readme(tmp_path)
