"""``eo release-fence`` and ``--fence-owner``: the fence's owner by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from eo_jobs.protocol.control import ControlStore
from tests.protocol import harness
from tests.test_cli_sweep import SPEC

OLD = "uid-of-the-pipeline-in-the-lost-cluster"


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    """The pipeline ``default/ledger`` of the protocol harness, as a user's YAML file."""
    path = tmp_path / "ledger.yaml"
    path.write_text(SPEC)
    return path


def _eo(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eo_jobs.cli", *args],
        capture_output=True,
        check=False,
        text=True,
        env={"LEDGER_DSN": dsn, "PATH": "/usr/bin:/bin"},
        timeout=120,
    )


def test_release_fence_lets_go_of_the_named_owners_fence_only(pg_dsn: str, spec: Path) -> None:
    control = ControlStore(pg_dsn)
    control.ensure_schema()
    control.raise_fence(harness.PIPELINE, 6, OLD)
    wrong = _eo(pg_dsn, "release-fence", str(spec), "--owner", "someone-else")
    assert wrong.returncode == 1, wrong.stderr
    assert f"the fence is owned by '{OLD}'" in wrong.stderr
    done = _eo(pg_dsn, "release-fence", str(spec), "--owner", OLD)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "pipeline": harness.PIPELINE,
        "fence": 6,
        "owner": OLD,
        "released": True,
    }
    fence = control.fence(harness.PIPELINE)
    assert fence is not None and (fence.epoch, fence.owner) == (6, None)


def test_recover_claims_the_fence_only_for_an_owner_given(pg_dsn: str, spec: Path) -> None:
    harness.create_table(pg_dsn)
    control = ControlStore(pg_dsn)
    control.ensure_schema()
    control.raise_fence(harness.PIPELINE, 2, OLD)
    plain = _eo(pg_dsn, "recover", str(spec), "--epoch", "3")  # fences, keeps the owner
    assert plain.returncode == 0, plain.stderr
    refused = _eo(pg_dsn, "recover", str(spec), "--epoch", "4", "--fence-owner", "me")
    assert refused.returncode != 0 and f"owned by '{OLD}'" in refused.stderr, refused.stderr
    fence = control.fence(harness.PIPELINE)
    assert fence is not None and (fence.epoch, fence.owner) == (3, OLD)
