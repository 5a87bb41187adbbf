"""The `gspo-bench` command line: wiring only; the work lives in the library modules."""

from __future__ import annotations

import functools
import importlib
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
import typer
from rich.markup import escape
from rich.table import Table

from gspo_bench.runtime.kernels import pin_kernels
from gspo_bench.runtime.stopping import Stopped, stop_on_signals
from gspo_bench.suite import PrintableConsole

if TYPE_CHECKING:
    pass

app = typer.Typer(
    help="Matched-compute benchmark of RL objectives (GRPO, GSPO, ...) on Mixture-of-Experts LMs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
_terminal = PrintableConsole()  # user text's control characters shown as escapes
console = _terminal if _terminal.is_terminal else PrintableConsole(width=140)  # logs, pipes: tables do not wrap


@app.callback()
def entry_point(ctx: typer.Context,
                debug: bool = typer.Option(False, "--debug", help="show the traceback of an error")) -> None:
    """Process-wide settings of the command line (the library sets none): one CPU kernel choice on every
    x86-64 CPU with AVX2, set before torch picks any (`gspo_bench.runtime.kernels`: results reproduce
    bit for bit across machines; GSPO_BENCH_NATIVE_KERNELS=1 opts out), no weight loading/saving
    progress bars from Hugging Face libraries (they drown the run's own), figures drawn headless,
    SIGTERM and Ctrl-C stop a suite (`gspo_bench.runtime.stopping`: runs in progress recorded as failed, resumable).
    `--debug` is this invocation's context state (`ctx.obj`), read by `guarded`."""
    ctx.obj = {"debug": debug}
    pin_kernels()  # workers (--parallel, Ray, torchrun ranks) inherit the environment
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("MPLBACKEND", "Agg")
    stop_on_signals()


def say(text: str) -> None:
    """Plain text (paths may hold [brackets]: no markup is interpreted)."""
    console.print(text, markup=False, highlight=False)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print one error line and return the exit to raise (code 2: a user error)."""
    console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)  # one line, however long
    return typer.Exit(code)


# typer vendors click: its usage errors are not the installed click's classes
_USAGE_ERRORS: tuple[type[Exception], ...] = tuple({
    next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"), click.exceptions.ClickException})
_PRINTED_BY_TYPER: tuple[type[BaseException], ...] = (typer.Exit, typer.Abort, *_USAGE_ERRORS)
# ... nor its current context: the `globals` of the click package typer's Context comes from
_CLICK_GLOBALS = importlib.import_module(typer.Context.__mro__[1].__module__.rsplit(".", 1)[0] + ".globals")


def debug_on() -> bool:
    """Whether this invocation was given --debug (the root context's obj, set by `entry_point`)."""
    ctx = _CLICK_GLOBALS.get_current_context(silent=True)
    settings = ctx.find_root().obj if ctx is not None else None
    return bool(isinstance(settings, dict) and settings.get("debug"))


def guarded(command):
    """Every error a command meets becomes one line and exit code 2 (the traceback with --debug)."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except _PRINTED_BY_TYPER:  # typer's own: it prints them
            raise
        except Stopped as err:
            raise fail(str(err), err.exit_code) from None
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None
        except Exception as err:
            if debug_on():
                raise
            what = str(err).splitlines()[0] if str(err) else ""
            raise fail(f"{type(err).__name__}: {what} (run with --debug for the traceback)") from None

    return wrapper


def plugin_option():
    return typer.Option(None, "--plugin", metavar="FILE|MODULE", help="a plugin to load first: a Python file or an "
                        "importable module registering objectives, corrections, tasks or engines (docs/plugins.md); "
                        "repeatable")


def load_plugins_or_fail(names: list[str] | None) -> None:
    """The installed packages' plugins and `names` (files from the working folder), or one error line."""
    from gspo_bench.config.plugins import PluginError, load_plugins

    try:
        load_plugins(names or [])
    except PluginError as err:
        raise fail(str(err)) from None


@app.command("ls")
@guarded
def list_registered(plugins: list[str] | None = plugin_option()) -> None:
    """List the registered objectives, algorithms, tasks, corrections, MoE families and rollout engines."""
    from gspo_bench.suite import registry_tables

    load_plugins_or_fail(plugins)
    for table in registry_tables():
        console.print(table)


def set_option():
    return typer.Option(None, "--set", metavar="PATH=VALUE", help="set a suite field by dotted path, as `sweep:` "
                        "names it (train.device=cuda, objectives.0.clip_high=0.3); the value is read as YAML; "
                        "repeatable; recorded in each run's config.yaml and provenance.json")


@app.command()
@guarded
def validate(suite_path: Path = typer.Argument(..., help="suite YAML file"), overrides: list[str] | None = set_option()
             ) -> None:
    """Check a suite file as `run` would before any compute (models, tasks, objectives, devices,
    engines, eval tasks, the sweep); print the planned runs."""
    from gspo_bench.config import SuiteError
    from gspo_bench.suite import load_runnable, plan_runs, trial_lines

    try:
        suite, values = load_runnable(suite_path, overrides)
    except SuiteError as err:
        raise fail(str(err)) from None
    runs = plan_runs(suite, Path(suite.output_dir), overrides=values)
    given = f" with {', '.join(overrides or [])}" if values else ""
    say(f"{suite_path}{given}: valid suite {suite.name!r}: {len(runs)} runs, budget {suite.budget.kind}="
        f"{suite.budget.value:g}")
    for run in runs:
        say(f"  {run.name}: {run.entry.objective}, replay={run.entry.use_replay}, {run.entry.clip_range()}")
    for line in trial_lines(suite):
        say(line)


def parse_seeds(seeds: str | None) -> list[int] | None:
    if seeds is None:
        return None
    try:
        values = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated integers, got {seeds!r}", param_hint="--seeds") from None
    if len(set(values)) != len(values) or not values:
        raise typer.BadParameter(f"expected distinct seeds, got {seeds!r}", param_hint="--seeds")
    from gspo_bench.config.schema import MAX_SEED

    outside = [v for v in values if not 0 <= v <= MAX_SEED]
    if outside:  # the bounds of the suite's `seeds:`, which --seeds replaces
        raise typer.BadParameter(f"each seed must be in 0..{MAX_SEED}, got {outside[0]}", param_hint="--seeds")
    return values


def check_ray_installed() -> None:
    """`fail` naming the missing package where --ray is asked for and Ray is not importable, before the
    warm start (run_on_ray would find out only after it)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise fail("--ray needs Ray: pip install -e '.[ray]'") from None


def print_plan(suite_path: Path, overrides: list[str] | None = None, only: list[str] | None = None,
               seeds: list[int] | None = None) -> None:
    """The dry run's table: the plan of the runs `run` would do with these options (`--only` labels,
    `--seeds`: the runs, their count and the suite's FLOPs are theirs alone)."""
    from gspo_bench.config import SuiteError
    from gspo_bench.suite import PlanError, dry_run_rows

    try:
        suite, rows = dry_run_rows(suite_path, overrides, only, seeds)
    except (SuiteError, PlanError, ValueError) as err:
        raise fail(str(err)) from None
    given = "".join(f" --set {item}" for item in overrides or []) + "".join(f" --only {label}" for label in only or [])
    given += f" --seeds {','.join(map(str, seeds))}" if seeds is not None else ""
    table = Table(title=escape(f"dry run: suite {suite.name!r} ({suite_path}{given})"), show_header=False)
    for key, value in rows:
        table.add_row(key, escape(value))
    console.print(table)


@app.command()
@guarded
def run(
    suite_path: Path = typer.Argument(..., help="suite YAML file"),
    out: Path | None = typer.Option(None, "--out", help="results root (default: the suite's output_dir)"),
    only: list[str] | None = typer.Option(None, "--only", help="run only this label (repeatable)"),
    seeds: str | None = typer.Option(None, "--seeds", help="comma-separated seeds (default: the suite's)"),
    overrides: list[str] | None = set_option(),
    resume: bool = typer.Option(False, "--resume", help="continue unfinished runs from their checkpoints"),
    dry_run: bool = typer.Option(False, "--dry-run", help="validate and print the planned compute and memory; "
                                 "runs nothing, needs no GPU and no weights"),
    parallel: int = typer.Option(1, "--parallel", min=0, help="runs at once as local processes (0: as many as "
                                 "the cores allow at train.threads each)"),
    ray: bool = typer.Option(False, "--ray", help="each run as a Ray task (a local Ray cluster, or --ray-address)"),
    ray_address: str | None = typer.Option(None, "--ray-address", help="an existing Ray cluster (e.g. auto, "
                                           "ray://host:10001); implies --ray"),
    allow_changed: bool = typer.Option(False, "--allow-changed", help="with --resume: continue runs whose suite "
                                       "was edited (or given other --set values) since they started (the change "
                                       "is recorded in provenance)"),
    make_report: bool = typer.Option(False, "--report", help="write the report of the suite's results at the end "
                                     "(as `gspo-bench report` does)"),
) -> None:
    """Train every objective x seed of a suite to the same compute budget; one row per step."""
    from gspo_bench.rundir.lock import RunBusyError
    from gspo_bench.runtime.distributed import joined_world
    from gspo_bench.suite import (
        ConsoleShow,
        Launch,
        exit_code,
        plan_session,
        start_process_server,
    )

    if dry_run:
        return print_plan(suite_path, overrides, only, parse_seeds(seeds))
    if parallel > 1 and not (ray or ray_address):  # the workers' imports overlap ours from here on
        start_process_server()
    if ray or ray_address:
        check_ray_installed()
    try:  # under torchrun: this rank's world, every rank past the checks of the outputs before any writes
        session = plan_session(suite_path, overrides, out, only, parse_seeds(seeds), resume, allow_changed)
        launch = Launch(resume=resume, allow_changed=allow_changed, world=joined_world(session.suite.train.device),
                        parallel=parallel, ray_address=ray_address if (ray or ray_address) else False)
    except (ValueError, FileExistsError, RunBusyError) as err:  # SuiteError is a ValueError
        raise fail(str(err)) from None
    from analysis import AdaptivePlacer, LiveWarnings

    show = ConsoleShow(console if launch.world.is_main else PrintableConsole(quiet=True), watch=LiveWarnings)
    try:
        outcomes = session.run(launch, show, AdaptivePlacer)
    except OSError as err:
        raise fail(f"cannot write results under {session.root}: {err.strerror or err} "
                   f"({err.filename or session.root})") from None
    except KeyboardInterrupt as err:
        raise suite_stopped(err, suite_path, session.root, overrides) from None
    except ValueError as err:  # a tuned suite whose arms cannot be chosen (TuningError), a refused comparison
        raise fail(str(err)) from None
    if launch.world.is_main:
        what_next(session.suite_dir, make_report)
    code = exit_code(outcomes)
    if code:
        raise typer.Exit(code)


def program() -> str:
    """How this command was called (`.venv/bin/gspo-bench` from the Makefile), for commands to copy."""
    called = Path(sys.argv[0]) if sys.argv else Path()
    return str(called) if called.name == "gspo-bench" else "gspo-bench"


def what_next(suite_dir: Path, make_report: bool) -> None:
    """The end of `run`: where the results are, the suite's answer in at most five plain sentences
    (analysis.console_answer), then where the full report is (with --report) or the command that makes it."""
    say(f"results: {suite_dir}")
    if make_report:
        report(results=[suite_dir], out=None, allow_unmatched=False)
    print_answer(suite_dir)
    if make_report:
        say(f"full report: {suite_dir / 'report' / 'report.html'} (and report.md beside it)")
    else:
        say(f"report:  {shlex.quote(program())} report {shlex.quote(str(suite_dir))}")


def print_answer(suite_dir: Path) -> None:
    """The answer's sentences, one a line, or the one line that says why there is none."""
    from analysis import ResultsError, console_answer, load_results

    try:
        sentences = console_answer(load_results(suite_dir))
    except ResultsError as err:
        say(f"answer:  none ({err})")
        return
    say("answer:")
    for sentence in sentences:  # one line each, however long: the terminal wraps it, nothing is cut
        console.print(f"  {sentence}", markup=False, highlight=False, soft_wrap=True)


def suite_stopped(err: KeyboardInterrupt, suite_path: Path, root: Path, overrides: list[str] | None = None
                  ) -> typer.Exit:
    """The one line a stopped suite ends with (exit 130 after Ctrl-C, 143 after SIGTERM); the resume
    command repeats the `--set` overrides (other values would be an edit of the suite)."""
    given = [part for item in overrides or [] for part in ("--set", item)]
    resume_cmd = shlex.join(["gspo-bench", "run", str(suite_path), *given, "--out", str(root), "--resume"])
    return fail(f"{err if isinstance(err, Stopped) else 'interrupted'}: no further run starts; the runs in "
                f"progress are marked failed and keep their checkpoints; `{resume_cmd}` continues the suite",
                getattr(err, "exit_code", 130))


@app.command()
@guarded
def probe(
    objectives: str = typer.Option(
        "grpo,gspo,gspo_token,dapo,dr_grpo,gmpo,sapo,cispo", help="comma-separated objective names"
    ),
    family: str = typer.Option("qwen3_moe", help="tiny MoE family"),
    prompts: int = typer.Option(8, min=1),
    group_size: int = typer.Option(8, min=2),
    max_new_tokens: int = typer.Option(24, min=1),
    minibatches: int = typer.Option(4, min=1),
    lr: float = typer.Option(3e-4, min=0.0),
    seed: int = 0,
    plugins: list[str] | None = plugin_option(),
) -> None:
    """One RL step (K minibatch updates) of each objective on a tiny MoE from identical weights."""
    from gspo_bench.objectives import UnknownObjectiveError, objective_spec
    from gspo_bench.suite import PROBE_COLUMNS, ProbeConfig, probe_cells, run_probe

    load_plugins_or_fail(plugins)
    names = [n.strip() for n in objectives.split(",") if n.strip()]
    for name in names:
        try:
            objective_spec(name)  # unknown names fail before any work
        except UnknownObjectiveError as err:
            raise typer.BadParameter(str(err), param_hint="--objectives") from None
    if minibatches > prompts * group_size:
        raise typer.BadParameter(f"more than the {prompts * group_size} responses of the step ({prompts} prompts x "
                                 f"{group_size}), got {minibatches}", param_hint="--minibatches")
    cfg = ProbeConfig(
        objectives=names, family=family, prompts=prompts, group_size=group_size,
        max_new_tokens=max_new_tokens, minibatches=minibatches, lr=lr, seed=seed,
    )
    console.print(f"probe: {family}, P={prompts} x G={group_size}, K={minibatches} minibatches, lr={lr:g}")
    table = Table(title="one RL step per objective: means over the K minibatches")
    table.add_column("objective")
    for col in PROBE_COLUMNS:
        table.add_column(col, justify="right")
    with console.status("sampling and updating ...") as status:
        rows = run_probe(cfg, on_result=lambda r: status.update(f"done: {r['objective']}"))
    for row in rows:
        table.add_row(row["objective"], *probe_cells(row))
    console.print(table)
    if minibatches == 1:
        console.print("moe/drift: - with K=1 (measured on minibatches 2..K)")
    console.print(f"reward/mean of the shared rollouts: {rows[0]['reward/mean']:.3f}")


@app.command()
@guarded
def check(
    name: str = typer.Argument(..., help="a registered objective (built in, or from --plugin)"),
    plugins: list[str] | None = plugin_option(),
    seed: int = typer.Option(0, help="seed of the kit's random batches"),
    params: list[str] | None = typer.Option(None, "--param", metavar="KEY=VALUE", help="one of the objective's "
                                            "keywords (a suite entry's params, clip_low, clip_high), the value read "
                                            "as YAML; repeatable. Default: the function's defaults"),
    timeout: float = typer.Option(60.0, min=0.001, metavar="SECONDS", help="time limit of each property (a loss "
                                  "that loops or waits fails it; POSIX)"),
) -> None:
    """The conformance kit: measure the properties every objective must have (finite at extreme ratios,
    padding and order invariance, zero advantages, the on-policy gradient of its reduction, ascent,
    micro-batch exactness, declared inputs, measurements) on small batches; exit 1 on a failure, or
    where the objective breaks its contract (what it returns, its inputs unchanged), raises or runs
    past --timeout (one line naming it)."""
    from gspo_bench.config.kit_params import kit_settings
    from gspo_bench.objectives import UnknownObjectiveError, objective_spec
    from gspo_bench.objectives.conformance import ContractError, check_objective

    load_plugins_or_fail(plugins)
    try:
        objective_spec(name)
    except UnknownObjectiveError as err:
        raise fail(str(err)) from None
    try:
        settings = kit_settings(name, params or [])
    except ValueError as err:
        raise fail(str(err)) from None
    try:
        findings = check_objective(name, seed, settings=settings, timeout=timeout)
    except ContractError as err:
        if debug_on():
            raise
        raise fail(str(err), 1) from None
    for f in findings:
        say(f.line())
    failed = [f.property for f in findings if f.passed is False]
    if failed:
        say(f"{name}: {len(failed)} of {len(findings)} properties fail: {', '.join(failed)}")
        raise typer.Exit(1)
    skipped = sum(f.passed is None for f in findings)
    say(f"{name}: conforms ({len(findings) - skipped} properties pass, {skipped} declared not to apply)")


@app.command()
@guarded
def report(
    results: list[Path] = typer.Argument(..., help="results directories (a suite dir, a root of suites, or runs)"),
    out: Path | None = typer.Option(None, "--out", help="output directory (default: RESULTS/report)"),
    allow_unmatched: bool = typer.Option(False, "--allow-unmatched", help="compare runs whose compute differs by > 2%"),
) -> None:
    """Write report.md, a self-contained report.html and the figures for one or more results dirs."""
    from analysis import ResultsError, UnmatchedComputeError, load_results, write_report

    try:  # no plugin loads: what the report needs of one, its runs recorded (docs/plugins.md)
        loaded = load_results(*results)
        paths = write_report(loaded, out or results[0] / "report", allow_unmatched=allow_unmatched)
    except UnmatchedComputeError as err:
        raise fail(f"{err}; pass --allow-unmatched to compare anyway") from None
    except ResultsError as err:
        raise fail(str(err)) from None
    for unreadable in loaded.unreadable:
        say(f"unreadable: {unreadable} (left out of the report)")
    say(f"wrote {paths['md']}, {paths['html']} and {paths['figures']}/")


@app.command()
@guarded
def figures(
    results: list[Path] = typer.Argument(..., help="results directories"),
    out: Path | None = typer.Option(None, "--out", help="output directory (default: RESULTS/figures)"),
) -> None:
    """Write the paper-style figures (PNG and PDF) only."""
    from analysis import ResultsError, load_results, write_figures

    try:
        paths = write_figures(load_results(*results), out or results[0] / "figures")
    except ResultsError as err:
        raise fail(str(err)) from None
    say(f"wrote {len(paths)} files to {paths[0].parent}/")


@app.command()
@guarded
def regress(
    results: Path = typer.Argument(..., help="fresh results of experiments/ci.yaml (OUT/ci)"),
    baseline: Path = typer.Option(Path("results/ci-baseline"), "--baseline", help="committed baseline results"),
    tolerances: Path | None = typer.Option(None, "--tolerances", help="default: the package's own "
                                           "(analysis/checks/regress_tolerances.yaml)"),
    update: bool = typer.Option(False, "--update", help="rewrite the baseline from RESULTS"),
    allow_other_suite: bool = typer.Option(False, "--allow-other-suite", help="compare with a baseline of another "
                                           "suite (name or settings differ); the differences are printed"),
) -> None:
    """Compare fresh CI results with the baseline: step 1 to float noise, trajectory bands from the
    baseline's seeds, invariants; each check's distance in units of its tolerance; exit 1 on a regression.
    A baseline of another suite (name or resolved settings) is refused (exit 2), naming the differences."""
    from analysis import (
        check_cells,
        check_notes,
        compare,
        load_results,
        load_tolerances,
        other_suite,
        regressions_text,
        update_baseline,
    )

    try:
        if update:
            written = update_baseline(results, baseline)
            say(f"baseline updated: {baseline} now holds {len(written)} files from {results}")
            return
        current, base = load_results(results), load_results(baseline)
        rules = load_tolerances(tolerances)
    except (ValueError, FileNotFoundError) as err:  # the analysis' ResultsError too
        raise fail(str(err)) from None
    other = other_suite(current, base)
    if other and not allow_other_suite:
        raise fail(f"{baseline} is the baseline of another suite: {other}; pass --allow-other-suite to compare anyway")
    if other:
        say(f"warning: the baseline is another suite (allowed by flag): {other}")
    checks = compare(current, base, rules)
    table = Table(title=escape(f"regress {results} against {baseline}"))
    for col in ("objective", "metric", "baseline", "current", "tolerance", "x tolerance", "result"):
        table.add_column(col)
    for c in checks:
        table.add_row(*map(escape, check_cells(c)), "ok" if c.ok else "[red]REGRESSION[/red]")
    console.print(table)
    for line in check_notes(checks):
        say(line)
    failed = regressions_text(checks)
    if failed:
        console.print(f"[red]{escape(failed)}[/red]")
        raise typer.Exit(1)
    console.print(f"no regression ({len(checks)} checks)")


@app.command("import")
@guarded
def import_runs(
    plan: Path = typer.Argument(..., help="an import plan (YAML: name, mapping, compute, runs; docs/import.md)"),
    out: Path = typer.Option(..., "--out", help="output root: the runs go to OUT/<name>/<arm>-s<seed>/"),
) -> None:
    """Turn runs another library wrote (TRL, verl, or any library a mapping file describes) into run folders
    that `report` reads."""
    from gspo_bench.imports.mapping import MappingError
    from gspo_bench.imports.plan import PlanError
    from gspo_bench.imports.write import ImportError_, import_plan

    try:
        target, reads = import_plan(plan, out)
    except (PlanError, MappingError, ImportError_) as err:
        raise fail(str(err)) from None
    for read in reads:
        say(read.summary())
    say(f"wrote {len(reads)} runs to {target}/ (gspo-bench report {target})")


@app.command("reproduce")
@guarded
def reproduce(
    reference: Path = typer.Argument(..., help="reference results of a suite (e.g. results/quickstart)"),
    fresh: Path = typer.Argument(..., help="fresh results of the same suite (e.g. runs/quickstart)"),
) -> None:
    """Check that FRESH reproduces REFERENCE bit for bit: every run's metrics, layers, evaluations and
    status (wall times aside); exit 1 naming the first difference of each run that differs."""
    from analysis import compare_results

    try:
        found = compare_results(reference, fresh)
    except (ValueError, OSError) as err:
        raise fail(str(err)) from None
    table = Table(title=escape(f"{fresh} against {reference}"))
    for col in ("run", "result", "kernels (reference -> fresh)", "first difference"):
        table.add_column(col)
    for run in found:
        table.add_row(escape(run.run), "identical" if run.identical else "[red]differs[/red]",
                      escape(" -> ".join(str(k) for k in run.kernels)), escape(run.difference))
    console.print(table)
    differing = [run for run in found if not run.identical]
    if differing:
        console.print(f"[red]{len(differing)} of {len(found)} runs differ[/red]")
        raise typer.Exit(1)
    added = sorted({column for run in found for column in run.added})
    console.print(f"all {len(found)} runs identical" + (
        f" in every column the reference records (the fresh runs also record {len(added)} newer measurements, "
        f"not compared: {escape(', '.join(added))})" if added else ""))


@app.command("eval")
@guarded
def eval_policy(
    path: Path = typer.Argument(..., help="a run directory (its latest checkpoint) or a Hugging Face model directory"),
    tasks: str = typer.Option(..., "--tasks", help="comma-separated: our task names or lm-eval task names"),
    samples: int = typer.Option(1, min=1, help="samples per prompt (score = average Pass@1)"),
    limit: int = typer.Option(64, min=1, help="test documents per task"),
    greedy: bool = typer.Option(False, "--greedy", help="greedy decoding (samples must be 1)"),
    max_new_tokens: int = typer.Option(32, min=1),
    temperature: float = typer.Option(1.0, min=0.0),
    seed: int = 0,
    out: Path | None = typer.Option(None, "--out", help="where task files and scores go (default: PATH/eval)"),
    chat_template: bool | None = typer.Option(None, "--chat-template/--no-chat-template", help="render prompts with "
                                              "the tokenizer's chat template (default: as the run did; for a model "
                                              "directory, when its tokenizer has one)"),
) -> None:
    """Evaluate a saved policy with lm-eval on held-out task splits, standalone."""
    import json

    from gspo_bench.train import eval_config, evaluate_saved

    try:
        cfg = eval_config(tasks=[t.strip() for t in tasks.split(",") if t.strip()], samples=samples, limit=limit,
                          greedy=greedy, max_new_tokens=max_new_tokens, temperature=temperature)
    except ValueError as err:
        raise fail(str(err)) from None
    out = out or path / "eval"
    try:
        model_dir, scores = evaluate_saved(path, cfg, out, seed=seed, chat_template=chat_template)
    except ValueError as err:
        raise fail(str(err)) from None
    (out / "scores.json").write_text(json.dumps(scores, indent=1))
    table = Table(title=escape(f"lm-eval scores of {model_dir}"))
    for col in ("task", "score", "stderr", "metric"):
        table.add_column(col)
    for name, s in scores.items():
        table.add_row(escape(name), f"{s['score']:.4f}", f"{s['stderr']:.4f}", escape(s["metric"]))
    console.print(table)


@app.command()
def version() -> None:
    """Print the gspo-bench version."""
    from gspo_bench import __version__

    console.print(__version__)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
