"""Plugins: a user's own objectives, corrections, tasks and rollout engines, registered by the same
decorators the package uses, in a Python file or an importable module a suite names
(`plugins: [xpo.py, my_pkg.losses]`, files relative to the suite file) or that an installed package
offers through the entry-point group `gspo_bench.plugins`.

Loading one is all or nothing: a missing file, a syntax error, an import that fails, a name that
collides with a registered one, or a plugin that registers nothing is a `PluginError` of one line
naming the file (and line) and the problem, and whatever the plugin had registered before it failed
is taken back out. A loaded plugin is remembered by its path: the sweep points, the workers and the
report that read the suite again find it loaded. Each record keeps the file's sha256 (a run's
provenance) and the names it registered (the report tells plugin arms apart by them).
Importing this module loads no torch; loading a plugin imports the registries (and so torch).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENTRY_POINT_GROUP = "gspo_bench.plugins"


class PluginError(ValueError):
    """A plugin that cannot be loaded; the message is one line naming the file and the problem."""


@dataclass(frozen=True)
class Plugin:
    name: str  # as the suite or entry point names it: a file path or a module
    path: str  # the file that was executed (a module's __file__)
    sha256: str  # of that file
    registered: tuple[str, ...]  # "objective:xpo", "task:my_task", ... what loading it added

    def record(self) -> dict[str, Any]:
        """The plugin as provenance.json records it."""
        return {"name": self.name, "path": self.path, "sha256": self.sha256, "registered": list(self.registered)}


_LOADED: dict[str, Plugin] = {}  # by resolved file path or module name


def is_file_plugin(name: str) -> bool:
    """A path to a Python file (`xpo.py`, `plugins/xpo.py`), not a dotted module name."""
    return name.endswith(".py") or "/" in name or "\\" in name


def resolve(name: str, base: Path) -> str:
    """A file plugin as an absolute path (relative ones from `base`, the suite file's folder); a module as is."""
    if not is_file_plugin(name):
        return name
    path = Path(name).expanduser()
    return str((path if path.is_absolute() else base / path).resolve())


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _registries() -> dict[str, Any]:
    """kind -> its Registry, the package's own registrations made first (they are not the plugin's)."""
    import gspo_bench.objectives
    import gspo_bench.rollout
    import gspo_bench.tasks  # noqa: F401
    from gspo_bench.registry import KINDS

    return dict(KINDS)


def load_plugin(name: str) -> Plugin:
    """Load the plugin `name` (an absolute file path, see `resolve`, or a module name) once per process."""
    if name in _LOADED:
        return _LOADED[name]
    registries = _registries()
    before = {kind: set(table) for kind, table in registries.items()}
    try:
        if is_file_plugin(name):
            _execute_file(name)
            path = Path(name)
        else:
            path = _import_module(name)
        added = tuple(f"{kind}:{n}" for kind, table in registries.items() for n in sorted(set(table) - before[kind]))
        if not added:
            raise PluginError(f"{path}: registers nothing (no objective, correction, task or rollout engine): "
                              "decorate its functions with register_objective, register_correction, register_task "
                              "or register_engine")
    except BaseException:
        for kind, table in registries.items():  # all or nothing: take back what it registered before it failed
            for added_name in set(table) - before[kind]:
                del table[added_name]
        raise
    _LOADED[name] = Plugin(name, str(path), file_sha256(path), added)
    return _LOADED[name]


def _execute_file(name: str, module_prefix: str = "gspo_bench_plugin_") -> str:
    """Run the Python file `name` as a module of its own (in sys.modules: its dataclasses and pickles
    work); the module's name."""
    path = Path(name)
    if not path.is_file():
        raise PluginError(f"{path}: no such {'plugin ' if module_prefix == 'gspo_bench_plugin_' else ''}file")
    module_name = f"{module_prefix}{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"{path}: not a Python file Python can load")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as err:
        sys.modules.pop(module_name, None)
        raise PluginError(_failure_line(path, err)) from None
    return module_name


def _import_module(name: str) -> Path:
    """Import the plugin module `name`; its file."""
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as err:
        raise PluginError(f"{name}: no module named {err.name!r} (a plugin module must be importable: installed, "
                          "or on PYTHONPATH; a file is named by its path, ending in .py)") from None
    except BaseException as err:
        raise PluginError(_failure_line(Path(name), err)) from None
    return Path(module.__file__ or name)


def _failure_line(path: Path, err: BaseException) -> str:
    """`file:line: what went wrong` for an error raised while loading the plugin at `path`."""
    from gspo_bench.registry import NameTakenError

    if isinstance(err, SyntaxError):
        return f"{err.filename or path}:{err.lineno}: syntax error: {err.msg}"
    if isinstance(err, NameTakenError):
        return f"{path}: {err}"
    frames = [f for f in traceback.extract_tb(err.__traceback__) if Path(f.filename) == path]
    where = f"{path}:{frames[-1].lineno}" if frames else str(path)
    what = str(err).splitlines()[0] if str(err) else ""
    return f"{where}: loading the plugin raised {type(err).__name__}: {what}"


_FUNCTIONS: dict[tuple[str, str], Any] = {}


def load_function(path: str, name: str) -> Any:
    """The callable `name` of the Python file `path` (absolute: `resolve`), e.g. a task's reward function;
    PluginError naming the file and the problem (no such file, a syntax or import error, no such name,
    not callable). Loaded once per process."""
    if (path, name) not in _FUNCTIONS:
        module_name = _execute_file(path, module_prefix="gspo_bench_function_")
        fn = getattr(sys.modules[module_name], name, None)
        if not callable(fn):
            raise PluginError(f"{path}: defines no function {name!r}" + ("" if fn is None else " (not callable)"))
        _FUNCTIONS[(path, name)] = fn
    return _FUNCTIONS[(path, name)]


_INSTALLED: dict[str, list[str]] = {}  # "modules": the entry points' modules, read once per process


def installed_plugins() -> list[str]:
    """Modules that installed packages offer as plugins (entry-point group `gspo_bench.plugins`), read
    once per process (every suite validation asks: a sweep validates each of its points)."""
    if "modules" not in _INSTALLED:
        _INSTALLED["modules"] = sorted({ep.value.split(":")[0].strip()
                                        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)})
    return list(_INSTALLED["modules"])


def load_plugins(names: list[str] | tuple[str, ...] = (), base: Path | None = None) -> list[Plugin]:
    """The installed packages' plugins, then `names` (files resolved from `base`, default the working
    folder); the named ones' records, in order."""
    for module in installed_plugins():
        load_plugin(module)
    return [load_plugin(resolve(name, base or Path.cwd())) for name in names]


def loaded_plugins() -> list[Plugin]:
    """Every plugin loaded in this process, in loading order."""
    return list(_LOADED.values())


def recorded_plugins(results: list[Path]) -> list[str]:
    """The plugins that the suites under `results` (their OUT/<suite>/suite.yaml files, two levels deep
    at most) were run with: the report loads them to build what their runs registered (a plugin task's
    baseline)."""
    from gspo_bench.config.yamlread import read_yaml

    found: list[str] = []
    for root in results:
        for path in [root / "suite.yaml", *root.glob("*/suite.yaml")]:
            if path.is_file():
                data = read_yaml(path.read_text(encoding="utf-8"))
                found += [str(n) for n in (data.get("plugins") or []) if str(n) not in found] if isinstance(data, dict) else []
    return found


def unload_plugins() -> None:
    """Take back every loaded plugin's registrations and forget it (a process that loads another version
    of a plugin file; the tests, which load many into one process)."""
    from gspo_bench.registry import KINDS

    for plugin in _LOADED.values():
        if not is_file_plugin(plugin.name):  # imported again on the next load, registering again
            sys.modules.pop(plugin.name, None)
        for entry in plugin.registered:
            kind, _, name = entry.partition(":")
            KINDS[kind].pop(name, None)
    for module in [m for m in sys.modules if m.startswith(("gspo_bench_plugin_", "gspo_bench_function_"))]:
        del sys.modules[module]
    _LOADED.clear()
    _FUNCTIONS.clear()
    _INSTALLED.clear()
