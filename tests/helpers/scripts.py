"""The project's experiment scripts as modules, loaded from their files (experiments/ is no package):
a test reads what a script defines without putting a folder on sys.path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def script(relative: str) -> ModuleType:
    """experiments/<relative> as a module, loaded once (later calls give the same module)."""
    name = "experiments." + relative.removesuffix(".py").replace("/", ".")
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / relative)
    if spec is None or spec.loader is None:
        raise ImportError(f"{EXPERIMENTS / relative}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
