"""Make ``pytest tests/cluster`` work on its own: load the cluster plugin if not registered.

Once ``tests/conftest.py`` lists ``tests.cluster.plugin`` in ``pytest_plugins`` this does
nothing, so the session keeps exactly one control plane.
"""

from __future__ import annotations

import pytest

PLUGIN = "tests.cluster.plugin"


def pytest_configure(config: pytest.Config) -> None:
    """Register the cluster plugin (fixtures and ``cluster`` marker) unless already there."""
    if not config.pluginmanager.has_plugin(PLUGIN):
        config.pluginmanager.import_plugin(PLUGIN)
