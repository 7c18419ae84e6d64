"""Registers the ``kind`` marker, and lets ``pytest tests/e2e/kind`` find ``kube_cluster``.

The marker is registered here, next to the only tests that use it, so ``--strict-markers``
accepts it wherever pytest is started. The cluster plugin import does nothing once
``tests/conftest.py`` lists ``tests.cluster.plugin`` in ``pytest_plugins``, so the session
keeps exactly one control plane.
"""

from __future__ import annotations

import pytest

PLUGIN = "tests.cluster.plugin"
MARKER = "kind: builds the images and runs the chart on a kind cluster (needs Docker and kind)"


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``kind`` marker and the cluster plugin (unless already there)."""
    config.addinivalue_line("markers", MARKER)
    if not config.pluginmanager.has_plugin(PLUGIN):
        config.pluginmanager.import_plugin(PLUGIN)
