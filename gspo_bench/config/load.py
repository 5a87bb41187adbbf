"""Reading a suite: the YAML file, `--set` overrides and sweep points, validated into `SuiteConfig`;
every problem a `SuiteError` that names the file and the field."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ValidationError

from gspo_bench.config.schema import ObjectiveEntry, SuiteConfig
from gspo_bench.config.shown import clip, shown
from gspo_bench.config.yamlread import read_yaml

if TYPE_CHECKING:
    from gspo_bench.config.plugins import Plugin


class SuiteError(ValueError):
    """A suite file that cannot be read or validated; the message names file and field."""


def _problems(err: ValidationError) -> list[str]:
    """One "field: what is wrong (got value)" per validation error."""
    problems = []
    for e in err.errors():
        where = clip(".".join(str(p) for p in e["loc"])) or "(top level)"
        if e["type"] == "missing":
            problems.append(f"{where}: required field missing")
            continue
        msg = "unknown key (not a field of this section)" if e["type"] == "extra_forbidden" else e["msg"]
        got = "" if isinstance(e.get("input"), dict) else f" (got {shown(e['input'])})"
        problems.append(f"{where}: {msg.removeprefix('Value error, ')}{got}")
    return problems


def problems_text(source: str, problems: list[str]) -> str:
    """`source: problem` on one line, or a count and one indented line per problem."""
    if len(problems) == 1:
        return f"{source}: {problems[0]}"
    return "\n".join([f"{source}: {len(problems)} problem(s)", *(f"  {p}" for p in problems)])


def _format_errors(path: str, err: ValidationError) -> str:
    return problems_text(path, _problems(err))


def parse_suite(data: Any, source: str = "<suite>", file: Path | None = None) -> SuiteConfig:
    """Validate suite data, its plugins loaded first; with a sweep, every sweep point is validated as a
    suite too. `file`: the suite file `data` was read from (its plugins, reward file and task paths are
    read from its folder); data given without one names its plugin files from the working folder."""
    if not isinstance(data, dict):
        raise SuiteError(f"{source}: expected a mapping of suite fields at the top level")
    return _checked(data, source, lambda err: _format_errors(source, err), file)


def _checked(data: dict[str, Any], source: str, describe: Callable[[ValidationError], str],
             file: Path | None = None) -> SuiteConfig:
    """The suite of `data` with every check a suite gets, however it was made (a file, data, `--set`):
    its plugins loaded (`with_plugins`), the schema, every sweep point and every entry's `set:` as a
    suite, and run labels unique across entries and points. A schema problem is `describe`d; the others
    name `source`."""
    data = with_plugins(data, file, source)
    try:
        suite = SuiteConfig.model_validate(data)
    except ValidationError as err:
        raise SuiteError(describe(err)) from None
    points = sweep_points(suite, source)
    check_run_names(suite, points, source)
    check_arms(suite, points, source)
    return suite


def check_run_names(suite: SuiteConfig, points: list[tuple[dict[str, Any], SuiteConfig]], source: str) -> None:
    """SuiteError (one line) naming both objective entries or sweep points whose runs would share a label,
    or a folder (folder names compared ignoring letter case, as macOS and Windows file systems do)."""
    from gspo_bench.config import sweep
    from gspo_bench.rundir.names import folder_name

    seen: dict[str, tuple[str, int, int]] = {}
    for p, (point, _) in enumerate(points):
        for i, entry in enumerate(suite.objectives):
            label = sweep.run_label(entry.run_label, point)
            key = folder_name(label).casefold()
            if key not in seen:
                seen[key] = (label, i, p)
                continue
            first, j, q = seen[key]
            what = (f"objectives.{j} ({suite.objectives[j].run_label}) and objectives.{i} ({entry.run_label})"
                    if p == q else f"sweep points {q + 1} ({sweep.describe(points[q][0])}) and {p + 1} "
                    f"({sweep.describe(point)})" + ("" if i == j else f" of objectives.{j} and objectives.{i}"))
            same = f"the same run label {shown(label)}" if first == label else f"run labels {shown(first)} and {shown(label)} " \
                "(one folder where letter case is ignored)"
            hint = "set `label:`" if p == q else "sweep values must differ in their labels, which show floats to 6 significant digits"
            raise SuiteError(f"{source}: {what} give {same}: labels must be unique ({hint})")


def sweep_points(suite: SuiteConfig, source: str = "<suite>") -> list[tuple[dict[str, Any], SuiteConfig]]:
    """(point {path: value}, the suite at that point) for every sweep point; [({}, suite)] without a sweep.
    SuiteError naming the file and the swept field for a path that does not exist or a value that
    does not validate."""
    from gspo_bench.config import sweep

    if not suite.sweep:
        return [({}, suite)]
    dumped = suite.model_dump(mode="json")
    for path in (p for key in suite.sweep for p in sweep.axis_paths(key)):
        try:
            sweep.field_of(dumped, path)
        except KeyError as err:
            raise SuiteError(f"{source}: sweep.{path}: {err.args[0]}") from None
    expanded = []
    for point in sweep.points(suite.sweep):
        try:
            expanded.append((point, SuiteConfig.model_validate(sweep.apply(suite, point))))
        except ValidationError as err:
            raise SuiteError(_format_errors(f"{source} (sweep point {_point_text(point)})", err)) from None
    return expanded


def arm_suite(suite: SuiteConfig, entry: ObjectiveEntry, source: str = "<suite>") -> SuiteConfig:
    """The suite the runs of objective `entry` use: `suite` (one sweep point's) with the entry's own
    `set:` values, validated like a sweep point; `suite` itself for an entry without. SuiteError naming
    the entry's field for a path that does not exist or a value that does not validate, and the entry
    where its arm's settings make no sense for its objective (`SuiteConfig.arm_problem`)."""
    from gspo_bench.config import sweep

    run = suite
    if entry.set:
        where = f"{source}: {_entry_name(suite, entry)}.set"
        dumped = suite.model_dump(mode="json")
        for path in entry.set:
            try:
                sweep.field_of(dumped, path)
            except KeyError as err:
                raise SuiteError(f"{where}.{path}: {err.args[0]}") from None
        try:
            run = SuiteConfig.model_validate(sweep.apply(suite, entry.set))
        except ValidationError as err:
            raise SuiteError(f"{where}: {'; '.join(_problems(err))}") from None
    problem = run.arm_problem(entry)  # what an arm's own settings make of its objective (decoupled + a correction)
    if problem is not None:
        raise SuiteError(f"{source}: {_entry_name(suite, entry)}: {problem}")
    return run


def check_arms(suite: SuiteConfig, points: list[tuple[dict[str, Any], SuiteConfig]], source: str = "<suite>") -> None:
    """Every objective entry's own suite (`set:`) validates at every sweep point (`points`); SuiteError
    for an entry that sets a field the suite sweeps (which value would hold?)."""
    from gspo_bench.config import sweep

    swept = [p for key in suite.sweep for p in sweep.axis_paths(key)]
    for entry in suite.objectives:
        for path in entry.set:
            if _overlaps(path, swept):
                raise SuiteError(f"{source}: {_entry_name(suite, entry)}.set.{path}: the suite sweeps this field; "
                                 "an arm cannot set it as well")
    for _, point_suite in points:
        for entry in point_suite.objectives:
            arm_suite(point_suite, entry, source)


def _overlaps(path: str, paths: Iterable[str]) -> bool:
    """Whether dotted `path` is one of `paths`, inside one, or holds one."""
    return any(path == p or path.startswith(f"{p}.") or p.startswith(f"{path}.") for p in paths)


def _entry_name(suite: SuiteConfig, entry: ObjectiveEntry) -> str:
    """`objectives.i (label)` of `entry` (labels are unique in a suite)."""
    return f"objectives.{[e.run_label for e in suite.objectives].index(entry.run_label)} ({entry.run_label})"


def _point_text(point: dict[str, Any]) -> str:
    from gspo_bench.config import sweep

    return ", ".join(f"{p}={clip(sweep.format_value(v))}" for p, v in point.items())


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """`PATH=VALUE` strings (`--set`) as {dotted path: value}, each value read as YAML (1e-3, true,
    bfloat16, null, [0.9, 0.95]). SuiteError for an item without `=` or a path given twice."""
    overrides: dict[str, Any] = {}
    for item in items:
        path, equals, text = item.partition("=")
        path = path.strip()
        if not equals or not path:
            raise SuiteError(f"--set {item}: expected PATH=VALUE, e.g. --set train.lr=3e-4")
        if path in overrides:
            raise SuiteError(f"--set {path}: given twice")
        try:
            overrides[path] = read_yaml(text)  # 2e-3 (no dot) is the number, as in the suite file
        except ValueError as err:
            raise SuiteError(f"--set {path}: {err}") from None
    return overrides


def apply_overrides(suite: SuiteConfig, overrides: dict[str, Any], source: str = "<suite>") -> SuiteConfig:
    """The suite with `overrides` ({dotted path: value}, as `--set` gives them) set, validated the way
    a sweep point is (the same paths, `sweep.field_of` and `sweep.apply`, the same field checks);
    its sweep, if any, is kept and expanded again. SuiteError in one line naming the file, the
    override and the problem; a field the suite also sweeps is refused (the sweep would replace it)."""
    from gspo_bench.config import sweep
    from gspo_bench.config.spelling import respell_paths

    if not overrides:
        return suite
    overrides = respell_paths(overrides, "--set")
    dumped = suite.model_dump(mode="json")
    swept = {p for key in suite.sweep for p in sweep.axis_paths(key)}
    for path in overrides:
        if sweep.split_path(path)[0] == "sweep":
            raise SuiteError(f"{source}: --set {path}: the sweep is set in the suite file, not with --set")
        try:
            sweep.field_of(dumped, path)
        except KeyError as err:
            raise SuiteError(f"{source}: --set {path}: {err.args[0]}") from None
        if _overlaps(path, swept):
            raise SuiteError(f"{source}: --set {path}: the suite sweeps this field (sweep: in the file); "
                             "override the sweep's values in the file instead")
    data = sweep.apply(suite, overrides) | {"sweep": suite.sweep}
    given = _point_text(overrides)
    return _checked(data, f"{source} with --set {given}",
                    lambda err: f"{source}: --set {given}: {'; '.join(_problems(err))}")


def not_a_file(path: Path) -> str:
    """What `path`, which is not a regular file nor a folder, is: missing, a symbolic link loop or to a
    missing file, a device, a named pipe (which reading would block on) or a socket."""
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "a symbolic link loop"
        return "a symbolic link to a missing file" if path.is_symlink() else "no such file"
    kinds = [(stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
             (stat.S_ISSOCK, "a socket")]
    kind = next((name for test, name in kinds if test(mode)), "something other")
    return f"{kind}, not a file: give the suite's YAML file"


def load_suite(path: str | Path, overrides: dict[str, Any] | None = None) -> SuiteConfig:
    """Read and validate a suite YAML file, with `overrides` ({dotted path: value}, `--set`) applied."""
    path = Path(path)
    if path.is_dir():
        raise SuiteError(f"{path}: is a directory; give the suite's YAML file")
    if not path.is_file():
        raise SuiteError(f"{path}: {not_a_file(path)}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise SuiteError(f"{path}: not a UTF-8 text file (byte {err.object[err.start]:#04x} at offset {err.start}): "
                         "give the suite's YAML file") from None
    except OSError as err:
        raise SuiteError(f"{path}: cannot be read ({err.strerror or err})") from None
    try:
        data = read_yaml(text)
    except ValueError as err:
        raise SuiteError(f"{path}: {err}") from None
    return apply_overrides(parse_suite(data, str(path), file=path), overrides or {}, str(path))


def with_plugins(data: dict[str, Any], file: Path | None, source: str) -> dict[str, Any]:
    """The suite data with the installed plugins and its own loaded, before the schema checks its
    objectives, tasks and engines against the registries. From a suite `file`: its plugin files named by
    absolute path (the suite written beside the results and the workers find them from anywhere), its
    reward file and task paths read from its folder. A suite without `plugins:` still sees the installed
    packages' plugins."""
    from gspo_bench.config.plugins import resolve

    if file is not None:
        data = with_reward_file(data, file)
    given = isinstance(data.get("plugins"), list)
    names = [str(name) for name in data["plugins"]] if given else []
    if file is not None:
        names = [resolve(name, file.resolve().parent) for name in names]
    load_suite_plugins(names, source)
    if file is None:
        return data
    return with_task_paths(data | {"plugins": names} if given else data, file)


def load_suite_plugins(names: list[str], source: str) -> list[Plugin]:
    """The records of the installed packages' plugins and the suite's `names` (files by absolute path or
    from the working folder), loaded where they are not; SuiteError `source: plugins: ` and the plugin's
    one line for one that cannot be loaded. The one door of a suite's plugins: a suite read
    (`with_plugins`: a file, data, `--set`) and a run opened in a worker process, which read no suite
    (gspo_bench.train.setup.open_run); a registry is never loaded from inside the schema."""
    from gspo_bench.config.plugins import PluginError, load_plugins

    try:
        return load_plugins(names)
    except PluginError as err:
        raise SuiteError(f"{source}: plugins: {err}") from None


def with_task_paths(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """The suite data with the task's path params (a registered task's `paths`: the jsonl task's file, the
    hf_dataset task's local data) read from the folder of the suite file `path`, as `plugins:` and
    `reward.from:` are: a relative one that names a file or folder there as an absolute path; one found
    in the working folder alone is a SuiteError saying how to write it; any other left as given (a hub
    id, or a missing file the task names)."""
    import os

    from gspo_bench.tasks.registry import list_tasks, task_spec

    task = data.get("task")
    if not isinstance(task, dict) or task.get("name") not in list_tasks() or not isinstance(task.get("params"), dict):
        return data
    folder, params = path.resolve().parent, dict(task["params"])
    for key in task_spec(str(task["name"])).paths:
        value = params.get(key)
        if not isinstance(value, str) or not value or Path(value).expanduser().is_absolute():
            continue
        here, cwd = folder / value, Path.cwd() / value
        if here.exists():
            params[key] = str(here.resolve())
        elif cwd.exists() and cwd.resolve() != here.resolve():
            raise SuiteError(f"{path}: task.params.{key}: {value!r} is in the working folder, not in the suite file's "
                             f"folder {folder}, which paths in a suite file are read from (as plugins: and "
                             f"reward.from:): write {os.path.relpath(cwd.resolve(), folder)!r} or an absolute path")
    return data | {"task": task | {"params": params}}


def dump_config(config: BaseModel) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


def with_reward_file(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """The suite data with task.reward's file (`from:` or `file:`) as an absolute path, read from the
    folder of the suite file `path`."""
    task = data.get("task")
    if not isinstance(task, dict) or not isinstance(task.get("reward"), dict):
        return data
    reward = task["reward"]
    key = "from" if "from" in reward else "file"
    if not isinstance(reward.get(key), str):
        return data
    where = Path(reward[key]).expanduser()
    absolute = str(where if where.is_absolute() else (path.resolve().parent / where).resolve())
    return data | {"task": task | {"reward": reward | {key: absolute}}}
