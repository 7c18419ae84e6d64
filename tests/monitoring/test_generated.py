"""The alert files are generated from one source, so Prometheus and Grafana cannot drift."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
generator = load_script("generate_monitoring")


def _copy(tmp_path: Path) -> Path:
    """The generator's inputs and outputs in a scratch tree."""
    for relative in (generator.SOURCE, generator.VALUES, *generator.outputs(ROOT)):
        target = tmp_path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / relative, target)
    return tmp_path


@pytest.mark.parametrize("path", sorted(generator.outputs(ROOT)))
def test_each_generated_alert_file_is_what_the_source_gives(path: str) -> None:
    assert (ROOT / path).read_text() == generator.outputs(ROOT)[path], (
        f"{path} drifted: edit {generator.SOURCE}, then run scripts/generate_monitoring.py"
    )


def test_check_mode_names_a_stale_file_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy(tmp_path)
    grafana = root / generator.GRAFANA
    grafana.write_text(grafana.read_text().replace("for: 10m", "for: 20m"))
    assert generator.main(["--check", "--root", str(root)]) == 1
    assert f"{generator.GRAFANA} is stale" in capsys.readouterr().out
    assert "for: 20m" in grafana.read_text()
    assert generator.main(["--root", str(root)]) == 0
    assert generator.main(["--check", "--root", str(root)]) == 0


def test_an_alert_added_to_a_generated_file_by_hand_is_not_overwritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy(tmp_path)
    rules = root / generator.PROMETHEUS
    document = yaml.safe_load(rules.read_text())
    document["groups"][0]["rules"].append({"alert": "EoByHand", "expr": "vector(1)"})
    rules.write_text(yaml.safe_dump(document))
    before = rules.read_text()
    assert generator.main(["--root", str(root)]) == 1
    assert "EoByHand" in capsys.readouterr().err
    assert rules.read_text() == before


def test_a_placeholder_the_chart_values_do_not_define_is_an_error(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    source = root / generator.SOURCE
    source.write_text(source.read_text().replace("${crashLoopMaxRelaunches}", "${crashLoopMax}"))
    with pytest.raises(ValueError, match=r"crashLoopMax, which charts/eo/values\.yaml"):
        generator.outputs(root)


def test_the_plain_files_carry_the_chart_defaults_and_no_placeholder() -> None:
    defaults = generator.parameters((ROOT / generator.VALUES).read_text())
    assert defaults["runbookBaseUrl"] == "https://github.com/eo-dev/eo/blob/main/docs/runbook.md"
    for path in (generator.PROMETHEUS, generator.GRAFANA):
        assert not generator.PLACEHOLDER.search((ROOT / path).read_text()), path
