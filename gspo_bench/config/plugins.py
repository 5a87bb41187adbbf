"""Plugins: a user's own objectives, corrections, tasks and rollout engines, registered by the same
decorators the package uses, in a Python file or an importable module a suite names
(`plugins: [xpo.py, my_pkg.losses]`, files relative to the suite file) or that an installed package
offers through the entry-point group `gspo_bench.plugins`. Every command that loads a suite's or the
command line's plugins (`load_plugins`) loads the installed ones first; the commands that read results
(`report`, `figures`, `regress`, `reproduce`, `import`) load none: what they need of a plugin is in the
run records (provenance.json's `plugins`, `task_baseline`).

Loading one is all or nothing: a missing file, a syntax error, an import that fails, a name that
collides with a registered one, a plugin that registers nothing, one whose import runs past its time
limit (`import_seconds`: a loop or a wait at import; POSIX, `gspo_bench.runtime.time_limit`), or one
that replaced or removed an entry registered before it (the registries are added to, never changed) is a `PluginError` of one
line naming the file (and line) and the problem, and the registries are put back as they were before
it. A loaded plugin is remembered by its path: the sweep points, the workers and the commands that
read the suite again find it loaded. Each record keeps the sha256 of the bytes that were executed
(read once, hashed and compiled from the same bytes: an edit after loading is not what ran) and the
names it registered (the report tells plugin arms apart by them).
Importing this module loads no torch; loading a plugin imports the registries (and so torch).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gspo_bench.rundir.records import PluginRecord
from gspo_bench.runtime.time_limit import TimeLimitExceeded, time_limit

ENTRY_POINT_GROUP = "gspo_bench.plugins"


class PluginError(ValueError):
    """A plugin that cannot be loaded; the message is one line naming the file and the problem."""


@dataclass(frozen=True)
class Plugin:
    name: str  # as the suite or entry point names it: a file path or a module
    path: str  # the file that was executed (a module's __file__)
    sha256: str  # of the bytes of that file that were executed when it loaded
    registered: tuple[str, ...]  # "objective:xpo", "task:my_task", ... what loading it added

    def record(self) -> PluginRecord:
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
    import gspo_bench.objectives.corrections
    import gspo_bench.rollout
    import gspo_bench.tasks  # noqa: F401
    from gspo_bench.registry import KINDS

    return dict(KINDS)


def load_plugin(name: str) -> Plugin:
    """Load the plugin `name` (an absolute file path, see `resolve`, or a module name) once per process."""
    if name in _LOADED:
        return _LOADED[name]
    from gspo_bench.registry import KINDS

    registries, kinds = _registries(), dict(KINDS)
    before = {kind: table.snapshot() for kind, table in registries.items()}
    made: list[str] = []  # the modules this load put in sys.modules
    try:
        if is_file_plugin(name):
            module, sha256 = _execute_file(name)
            made.append(module)
            path = Path(name)
        else:
            made += [] if name in sys.modules else [name]
            path, sha256 = _import_module(name)
        _check_untouched(path, registries, before)
        added = tuple(f"{kind}:{n}" for kind, table in registries.items() for n in sorted(set(table) - set(before[kind])))
        if not added:
            raise PluginError(f"{path}: registers nothing (no objective, correction, task or rollout engine): "
                              "decorate its functions with register_objective, register_correction, register_task "
                              "or register_engine")
    except BaseException:  # all or nothing: the registries as they were before it
        KINDS.clear()
        KINDS.update(kinds)
        for kind, table in registries.items():
            table.restore(before[kind])
        for module in made:  # a later load runs it again
            sys.modules.pop(module, None)
        raise
    for kind, table in registries.items():  # what it registered is the plugin's, whatever module defined it
        table.restore({n: (entry, origin if n in before[kind] else str(path))
                       for n, (entry, origin) in table.snapshot().items()})
    _LOADED[name] = Plugin(name, str(path), sha256, added)
    return _LOADED[name]


def _check_untouched(path: Path, registries: dict[str, Any], before: dict[str, dict[str, tuple[Any, str]]]) -> None:
    """PluginError naming the plugin at `path` and what it changed where loading it replaced or removed an
    entry registered before it (through a registry's mapping face or its tables) or a registry itself."""
    from gspo_bench.registry import KINDS

    changed = [f"the {kind} registry" for kind, table in registries.items() if KINDS.get(kind) is not table]
    for kind, table in registries.items():
        now = table.snapshot()
        changed += [f"{kind} {name!r}" for name, (entry, origin) in before[kind].items()
                    if name not in now or now[name][0] is not entry or now[name][1] != origin]
    if changed:
        shown = ", ".join(changed[:4]) + (f" and {len(changed) - 4} more" if len(changed) > 4 else "")
        raise PluginError(f"{path}: replaces or removes {shown}, registered before it: a plugin adds names of its own "
                          "(register_objective, register_task, ...) and leaves the registries' entries as they are")


def _run_source(module_name: str, spec: importlib.machinery.ModuleSpec, path: Path) -> str:
    """Execute the file `path` as the module `module_name` of `spec` (put in sys.modules: its dataclasses
    and pickles work) from bytes read once; the sha256 of those bytes. PluginError naming the file (and
    line) where it cannot be read or raises."""
    try:
        source = path.read_bytes()
    except OSError as err:
        raise PluginError(f"{path}: cannot be read ({err.strerror or err})") from None
    seconds = import_seconds()
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        with time_limit(seconds, "importing it"):
            exec(compile(source, str(path), "exec", dont_inherit=True), module.__dict__)  # noqa: S102 (the user's plugin)
    except BaseException as err:
        sys.modules.pop(module_name, None)
        raise PluginError(_failure_line(path, err)) from None
    return hashlib.sha256(source).hexdigest()


def _execute_file(name: str, module_prefix: str = "gspo_bench_plugin_") -> tuple[str, str]:
    """Run the Python file `name` as a module of its own, named by its stem and a hash of its whole path
    (two files of one stem in two folders are two modules); the module's name and the sha256 of the
    bytes that ran."""
    path = Path(name)
    if not path.is_file():
        raise PluginError(f"{path}: no such {'plugin ' if module_prefix == 'gspo_bench_plugin_' else ''}file")
    module_name = f"{module_prefix}{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"{path}: not a Python file Python can load")
    return module_name, _run_source(module_name, spec, path)


def _import_module(name: str) -> tuple[Path, str]:
    """Import the plugin module `name` (from its source, read once); its file and the sha256 of the bytes
    that ran. A module that is not Python source (compiled, a namespace package) is imported as Python
    imports it and its file hashed."""
    if name in sys.modules:  # imported before this load (by the package or another plugin): nothing runs now
        module = sys.modules[name]
        path = Path(getattr(module, "__file__", None) or name)
        return path, file_sha256(path) if path.is_file() else ""
    missing = PluginError(f"{name}: no module named {name!r} (a plugin module must be importable: installed, or on "
                          "PYTHONPATH; a file is named by its path, ending in .py)")
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and not (isinstance(spec.loader, importlib.machinery.SourceFileLoader) and spec.origin):
            module = importlib.import_module(name)
            path = Path(getattr(module, "__file__", None) or name)
            return path, file_sha256(path) if path.is_file() else ""
    except ModuleNotFoundError as err:
        raise PluginError(str(missing).replace(repr(name), repr(err.name or name), 1)) from None
    except BaseException as err:  # a parent package that raises, a name Python cannot import
        raise PluginError(_failure_line(Path(name), err)) from None
    if spec is None:
        raise missing
    path = Path(str(spec.origin))
    sha256 = _run_source(name, spec, path)
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:  # `import my_pkg.losses` finds it as an attribute of my_pkg, as an import would
        setattr(sys.modules[parent], child, sys.modules[name])
    return path, sha256


def _failure_line(path: Path, err: BaseException) -> str:
    """`file:line: what went wrong` for an error raised while loading the plugin at `path`."""
    from gspo_bench.registry import NameTakenError

    if isinstance(err, SyntaxError):
        return f"{err.filename or path}:{err.lineno}: syntax error: {err.msg}"
    if isinstance(err, NameTakenError):
        return f"{path}: {err}"
    chain = [err, *([err.__context__] if err.__context__ is not None else [])]  # a time limit: where it stopped
    frames = [f for e in chain for f in traceback.extract_tb(e.__traceback__) if Path(f.filename) == path]
    where = f"{path}:{frames[-1].lineno}" if frames else str(path)
    if isinstance(err, TimeLimitExceeded):
        return (f"{where}: {err} (a loop or a wait at import? a plugin's import defines and registers; "
                f"{IMPORT_SECONDS_VARIABLE}=SECONDS raises the limit)")
    what = str(err).splitlines()[0] if str(err) else ""
    return f"{where}: loading the plugin raised {type(err).__name__}: {what}"


IMPORT_SECONDS_VARIABLE = "GSPO_BENCH_IMPORT_TIMEOUT"
IMPORT_SECONDS = 300.0  # the time limit of a plugin's (or reward file's) import: a loop or a wait there hangs


def import_seconds() -> float:
    """The time limit of a plugin's import: GSPO_BENCH_IMPORT_TIMEOUT (seconds) or IMPORT_SECONDS;
    PluginError for a value that is not a positive number."""
    import math
    import os

    text = os.environ.get(IMPORT_SECONDS_VARIABLE)
    if text is None:
        return IMPORT_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise PluginError(f"{IMPORT_SECONDS_VARIABLE}={text!r}: expected a positive number of seconds")
    return seconds


_FUNCTIONS: dict[tuple[str, str], tuple[Any, str]] = {}  # (path, name) -> (the function, sha256 of its file as run)


def load_function(path: str, name: str) -> Any:
    """The callable `name` of the Python file `path` (absolute: `resolve`), e.g. a task's reward function;
    PluginError naming the file and the problem (no such file, a syntax or import error, no such name,
    not callable). Loaded once per process."""
    if (path, name) not in _FUNCTIONS:
        module_name, sha256 = _execute_file(path, module_prefix="gspo_bench_function_")
        fn = getattr(sys.modules[module_name], name, None)
        if not callable(fn):
            raise PluginError(f"{path}: defines no function {name!r}" + ("" if fn is None else " (not callable)"))
        _FUNCTIONS[(path, name)] = (fn, sha256)
    return _FUNCTIONS[(path, name)][0]


def function_sha256(path: str, name: str) -> str:
    """The sha256 of the bytes of file `path` that were executed when its function `name` was loaded
    (loading it now where it was not): what a run records of its reward file."""
    load_function(path, name)
    return _FUNCTIONS[(path, name)][1]


_INSTALLED: dict[str, list[importlib.metadata.EntryPoint]] = {}  # "points": the group's entry points, read once


def installed_entry_points() -> list[importlib.metadata.EntryPoint]:
    """The entry points installed packages offer as plugins (group `gspo_bench.plugins`), read once per
    process (every suite validation asks: a sweep validates each of its points)."""
    if "points" not in _INSTALLED:
        _INSTALLED["points"] = sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP),
                                      key=lambda point: (point.name, point.value))
    return list(_INSTALLED["points"])


def load_entry_point(point: importlib.metadata.EntryPoint) -> Plugin:
    """Load the installed plugin of entry point `point`: its value names a module (`my_pkg.losses`),
    whose import registers, or `module:attribute`, the module imported the same way and the attribute
    then required to exist (as Python resolves an entry point). PluginError naming the entry point and
    its distribution."""
    dist = getattr(getattr(point, "dist", None), "name", None)
    where = f"installed plugin {point.name} = {point.value} (entry point group {ENTRY_POINT_GROUP}" + (
        f" of {dist})" if dist else ")")
    try:
        plugin = load_plugin(point.module)
    except PluginError as err:
        raise PluginError(f"{err}; {where}") from None
    found: Any = sys.modules[point.module]
    for part in (point.attr or "").split(".") if point.attr else []:
        if not hasattr(found, part):
            raise PluginError(f"{plugin.path}: no attribute {point.attr!r}; {where}: name an attribute the module "
                              "defines, or the module alone")
        found = getattr(found, part)
    return plugin


def load_plugins(names: list[str] | tuple[str, ...] = (), base: Path | None = None) -> list[Plugin]:
    """The one way plugins load: the installed packages' plugins (every entry point of the group), then
    `names` (files resolved from `base`, default the working folder); the records of all of them, the
    installed ones first, each once. Called from two places: a suite's plugins
    (`gspo_bench.config.load.load_suite_plugins`: a suite read, a worker's run) and the command line's
    `--plugin` (`gspo_bench.cli`); the commands that read results never load any, the schema's validators
    neither (tests/test_structure.py)."""
    found: list[Plugin] = []
    for plugin in [*map(load_entry_point, installed_entry_points()),
                   *(load_plugin(resolve(name, base or Path.cwd())) for name in names)]:
        found += [] if plugin in found else [plugin]
    return found


def plugins_loaded(names: list[str] | tuple[str, ...] = (), base: Path | None = None) -> list[Plugin]:
    """What `load_plugins(names, base)` returned, looked up: the records of the installed packages' plugins
    and `names`, each once, loading nothing; PluginError naming one this process has not loaded (a suite's
    plugins load when the suite is read or a worker opens its run: `gspo_bench.config.load`)."""
    found: list[Plugin] = []
    for name in [*(point.module for point in installed_entry_points()), *(resolve(n, base or Path.cwd()) for n in names)]:
        if name not in _LOADED:
            raise PluginError(f"{name}: not loaded in this process (a suite's plugins load when the suite is read: "
                              "gspo_bench.config.load_suite or parse_suite)")
        found += [] if _LOADED[name] in found else [_LOADED[name]]
    return found


def loaded_plugins() -> list[Plugin]:
    """Every plugin loaded in this process, in loading order."""
    return list(_LOADED.values())


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
