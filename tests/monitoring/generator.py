"""scripts/generate_monitoring.py, loaded as a module (scripts/ is not a package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "generate_monitoring.py"


def load() -> ModuleType:
    """The generator module, freshly loaded."""
    spec = importlib.util.spec_from_file_location("generate_monitoring", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
