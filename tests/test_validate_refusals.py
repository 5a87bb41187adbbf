"""What `validate` refuses, `run` refuses, with the same line, before any compute: every refusal case
of the reliability tests goes through both commands. The rules behind them: the checks of a suite
file run again after `--set`; a boolean is never a number; sizes and seeds have bounds that the
message names; a YAML alias bomb is refused; the engine, its options, the router family, the devices,
the optimizer and the warm start's test split are checked by the functions a run uses."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import pytest
import torch
import yaml

from gspo_bench.config import SuiteError, load_suite, parse_overrides, parse_suite
from gspo_bench.rundir.names import MAX_NAME
from tests.helpers.cli import one_line_error
from tests.helpers.runs import tiny_suite


def bomb(levels: int = 9, width: int = 10) -> dict:
    """A YAML alias bomb as `yaml.safe_dump` writes it (each level an anchor, its list `width` aliases
    of the level below): 1.3 KB of YAML, `width ** levels` leaves for whatever walks it."""
    node: object = ["lol"] * width
    for _ in range(levels - 1):
        node = [node] * width
    return {"name": "sort", "params": {"max_len": 3, "x": node}}


def installed(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA machine runs this suite")
NO_TORCHAO = pytest.mark.skipif(installed("torchao"), reason="torchao is installed: adamw8bit builds")
NO_VLLM = pytest.mark.skipif(installed("vllm"), reason="vLLM is installed: the engine exists")
TWO = {"objectives": [{"name": "grpo"}, {"name": "gspo"}]}


def case(changes: dict, sets: list[str], fragment: str, *marks, id: str):  # noqa: A002
    return pytest.param(changes, sets, fragment, marks=marks, id=id)


# (changes to tests.helpers.runs.tiny_suite, --set items, what the one error line says)
REFUSALS = [
    # ---------------------------------------------------------------- the checks of the file, after --set
    case(TWO, ["objectives.1.label=grpo"], "objectives.0 (grpo) and objectives.1 (grpo) give the same run label",
         id="set-label-duplicate"),
    case(TWO, ["objectives=[{name: grpo}, {name: grpo, lr: 5.0e-3}]"], "objectives.0 (grpo) and objectives.1 (grpo)",
         id="set-objectives-duplicate"),
    case(TWO, ["objectives.1.label=GRPO"], "run labels 'grpo' and 'GRPO' (one folder where letter case is ignored)",
         id="set-label-case"),
    case({"sweep": {"train.lr": [1e-4, 2e-4]}}, ["objectives.1.label=grpo"], "objectives.0 (grpo) and objectives.1",
         id="set-label-duplicate-sweep"),
    # ---------------------------------------------------------------- a boolean is never a number
    case({}, ["train.lr=yes"], "train.lr: expected a number, got a boolean", id="bool-lr-yes"),
    case({"train": {"minibatches": True}}, [], "train.minibatches: expected a number, got a boolean", id="bool-int"),
    case({"seeds": [True]}, [], "seeds: expected a number, got a boolean at 0", id="bool-seed"),
    case({"budget": {"kind": "steps", "value": True}}, [], "budget.value: expected a number, got a boolean",
         id="bool-budget"),
    case({"model": {"router_scale": True}}, [], "model.router_scale: expected a number, got a boolean",
         id="bool-router-scale"),
    case({"task": {"name": "chain", "params": {"steps": True}}}, [], "task: params: expected a number, got a boolean "
         "at steps", id="bool-task-param"),
    case({"train": {"betas": [0.9, False]}}, [], "train.betas: expected a number, got a boolean at 1", id="bool-tuple"),
    case({}, ["train.micro_batch_tokens=true"], "train.micro_batch_tokens: expected a number, got a boolean",
         id="bool-field-added-later"),
    case({}, ["rollout.kv_cache_gib=yes"], "rollout.kv_cache_gib: expected a number, got a boolean",
         id="bool-float-field-added-later"),
    case({"objectives": [{"name": "dppo_binary_tv", "kwargs": {"delta": True}}]}, [], "objectives.0: params: expected "
         "a number, got a boolean at delta", id="bool-kwargs"),
    case({"objectives": [{"name": "grpo", "correction": {"kind": "opsm", "delta": True}}]}, [],
         "objectives.0.correction: expected a number, got a boolean at delta", id="bool-correction"),
    # ---------------------------------------------------------------- sizes and seeds within bounds
    case({"task": {"name": "chain", "params": {"steps": 200_000_000}}}, [], "chain: steps must be at most 10000",
         id="bound-chain-steps"),
    case({"seeds": [10**20]}, [], "seeds.0: Input should be less than or equal to 4294967295", id="bound-seed"),
    case({"seeds": [-1]}, [], "seeds.0: Input should be greater than or equal to 0", id="bound-seed-negative"),
    case({"warm_start": {"seed": 2**32}}, [], "warm_start.seed: Input should be less than or equal to 4294967295",
         id="bound-warm-start-seed"),
    case({}, ["rollout.max_new_tokens=100000000"], "rollout.max_new_tokens: Input should be less than or equal to",
         id="bound-max-new-tokens"),
    case({}, ["rollout.prompts_per_step=10000000"], "rollout.prompts_per_step: Input should be less than or equal to",
         id="bound-prompts"),
    case({}, ["model.num_layers=100000"], "model.num_layers: Input should be less than or equal to", id="bound-layers"),
    case({"task": bomb()}, [], "YAML aliases expand to more than", id="alias-bomb"),
    case({"model": {"router_scale": 1e300}}, [], "model.router_scale: Input should be less than or equal to 1000",
         id="bound-router-scale-high"),
    case({"model": {"router_scale": 1e-300}}, [], "model.router_scale: Input should be greater than or equal to 0.001",
         id="bound-router-scale-low"),
    case({"rollout": {"temperature": 1e-300}}, [], "rollout.temperature: Input should be greater than or equal to 0.01",
         id="bound-temperature-low"),
    case({}, ["rollout.temperature=1e300"], "rollout.temperature: Input should be less than or equal to 100",
         id="bound-temperature-high"),
    case({"eval": {"tasks": ["sort"], "temperature": 1e-9}}, [], "eval.temperature: Input should be greater than or "
         "equal to 0.01", id="bound-eval-temperature"),
    # ---------------------------------------------------------------- what a run checks, checked by validate
    case({"rollout": {"engine_options": {"router_noise": -1.0}}}, [], "rollout.engine_options (grpo, grpo_rr, gspo): hf engine: "
         "router_noise must be a finite number >= 0 (the noise's std), got -1.0", id="noise-negative"),
    case({"rollout": {"engine_options": {"router_noise": "a"}}}, [], "router_noise must be a finite number >= 0",
         id="noise-string"),
    case({"rollout": {"engine_options": {"router_noise": [0.1]}}}, [], "router_noise must be a finite number >= 0",
         id="noise-list"),
    case({"rollout": {"engine_options": {"nosuch": 1}}}, [], "hf engine: unknown engine_options nosuch",
         id="engine-unknown-option"),
    case({"rollout": {"engine_options": {"decode": "warp"}}}, [], "decode must be one of generate, static, got 'warp'",
         id="engine-decode"),
    *(case({"model": {"family": family}, "rollout": {"engine_options": {"router_noise": 0.3}}}, [],
           f"router_noise perturbs top-k over the router logits; {family} selects otherwise", id=f"noise-{family}")
      for family in ("deepseek_v3", "ernie4_5_moe", "llama4_text")),
    case({"rollout": {"engine": "vllm"}}, [], "rollout.engine (grpo, grpo_rr, gspo): rollout.engine vllm needs vLLM", NO_VLLM,
         id="engine-vllm-missing"),
    case({"warm_start": {"device": "cuda"}}, [], "warm_start.device (grpo, grpo_rr, gspo): cuda, but this machine has no CUDA device",
         NO_CUDA, id="warm-start-device"),
    case({"train": {"device": "cuda"}}, [], "train.device (grpo, grpo_rr, gspo): cuda, but this machine has no CUDA device", NO_CUDA,
         id="train-device"),
    case({"train": {"betas": [1.5, -2.0]}}, [], "train (grpo, grpo_rr, gspo): Invalid beta parameter at index 0: 1.5", id="optimizer-betas"),
    case({"objectives": [{"name": "grpo", "set": {"train.betas": [1.5, 0.9]}}, {"name": "gspo"}]}, [],
         "train (grpo): Invalid beta parameter at index 0: 1.5", id="optimizer-of-one-arm"),
    case({"sweep": {"train.betas": [[0.9, 0.99], [0.9, -2.0]]}}, [], "train (grpo, grpo_rr, gspo): Invalid beta "
         "parameter at index 1: -2.0", id="optimizer-of-one-sweep-point"),
    case({"train": {"optimizer": "adamw8bit"}}, [], "train (grpo, grpo_rr, gspo): train.optimizer: adamw8bit needs torchao", NO_TORCHAO,
         id="optimizer-8bit-missing"),
    case({"warm_start": {"eval_examples": 300}}, [], "warm_start.eval_examples (300): task sort {'max_len': 3}: the task's test split has "
         "fewer than 300 distinct problems", id="warm-start-eval-examples"),
    # what a run's rollout meets at its first step, checked by validate on the first step's prompts
    case({"rollout": {"kv_cache_gib": 1e-9}}, [], "rollout.kv_cache_gib (grpo, grpo_rr, gspo): rollout.kv_cache_gib "
         "= 1e-09 is below one row's KV cache at full length", id="kv-cache-below-one-row"),
    case({"objectives": [{"name": "grpo", "set": {"rollout.kv_cache_gib": 1e-9}}, {"name": "gspo"}]}, [],
         "rollout.kv_cache_gib (grpo): rollout.kv_cache_gib = 1e-09 is below one row's", id="kv-cache-of-one-arm"),
    case({"rollout": {"max_prompt_tokens": 2}}, [], "rollout.max_prompt_tokens (grpo, grpo_rr, gspo): a prompt of ",
         id="max-prompt-below-the-tasks-prompts"),
    # ---------------------------------------------------------------- earlier rounds
    case({"train": {"minibatches": 64}}, [], "minibatches", id="minibatches"),
    case({"model": {"path": "/no/such/model"}, "warm_start": {"enabled": False}}, [], "model.path", id="model-path"),
    case({"task": {"name": "sort", "params": {"max_len": -3}}}, [], "task", id="task-params"),
    case({"train": {"device": "tpu:7"}}, [], "train.device", id="device-name"),
    case({"model": {"hidden_size": 30}}, [], "model", id="model-sizes"),
    case({"objectives": [{"name": "grpo", "clip_low": -0.5}]}, [], "objectives.0", id="clip-negative"),
    case({"objectives": [{"name": "gspo", "clip_low": 1.5}]}, [], "objectives.0", id="clip-above-one"),
    case({"objectives": [{"name": "grpo", "kwargs": {"temperature": 2}}]}, [], "objectives.0", id="kwargs"),
    case({"eval": {"tasks": ["no_such_task"]}}, [], "eval.tasks", id="eval-task"),
    case({"task": {"name": "sort", "params": {"max_len": 3}}, "eval": {"tasks": ["sort"], "limit": 128}}, [],
         "eval.limit (128): task sort {'max_len': 3}: the task's test split has fewer than 128 distinct problems",
         id="eval-limit"),  # 102 distinct: every run failed at its first evaluation
    case({"rollout": {"engine": "sglang"}}, [], "rollout.engine", id="engine-name"),
    case({"seeds": [0, 0]}, [], "seeds", id="seeds-distinct"),
    *(case({"name": name}, [], "name: a suite name is a folder name", id=f"suite-name-{i}")
      for i, name in enumerate(["..", ".", "a/b", "x" * (MAX_NAME + 1), ""])),
    case({"sweep": {"train.lr": [1e-4, 1e-4]}}, [], "sweep points 1 (train.lr=0.0001) and 2 (train.lr=0.0001)",
         id="sweep-labels"),
    case({"objectives": [{"name": "grpo"}, {"name": "gspo", "label": "GRPO"}]}, [], "objectives.0 (grpo) and "
         "objectives.1 (GRPO)", id="label-case"),
    case({"objectives": [{"name": "grpo", "correction": {"kind": "opsm", "delta": math.nan}}]}, [],
         "objectives.0.correction: params.delta = nan", id="nan-correction"),
    case({"budget": {"kind": "steps", "value": math.inf}}, [], "budget.value: Input should be a finite number",
         id="inf-budget"),
    case({"train": {"lr": math.nan}}, [], "train.lr: Input should be a finite number", id="nan-lr"),
    case({"train": {"betas": [0.9, math.inf]}}, [], "train.betas.1: Input should be a finite number", id="inf-betas"),
    case({"warm_start": {"band": [math.nan, 0.5]}}, [], "warm_start.band.0: Input should be a finite number",
         id="nan-band"),
    case({"objectives": [{"name": "dppo_binary_tv", "kwargs": {"delta": -math.inf}}]}, [], "params: delta = -inf",
         id="inf-kwargs"),
    case({"sweep": {"train.grad_clip": [1.0, math.inf]}}, [], "train.grad_clip: Input should be a finite number",
         id="inf-sweep"),
]




def write_suite(path: Path, data: dict | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("changes, sets, fragment", REFUSALS)
def test_validate_and_run_refuse_alike_in_one_line_and_create_nothing(tmp_path, cli, changes, sets, fragment):
    suite = write_suite(tmp_path / "s.yaml", tiny_suite(tmp_path / "cache", **changes))
    given = [part for item in sets for part in ("--set", item)]
    validated = one_line_error(cli("validate", suite, *given))
    ran = one_line_error(cli("run", suite, *given, "--out", tmp_path / "out"))
    assert validated == ran and fragment in validated and "s.yaml" in validated, (validated, ran)
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


# ------------------------------------------------------------------ numbers

def test_yaml_exponents_and_ints_stay_numbers_and_booleans_stay_booleans(tmp_path):
    data = tiny_suite(tmp_path / "cache")
    data.pop("objectives")
    text = yaml.safe_dump(data).replace("lr: 0.001", "lr: 1e-3")
    text += "collapse: {reward_floor: 2e-2}\nobjectives: [{name: dppo_binary_tv, kwargs: {delta: 1e-1}}]\n"
    path = tmp_path / "s.yaml"
    path.write_text(text.replace("value: 3", "value: 3e0"))
    assert "lr: 1e-3" in text
    suite = load_suite(path, parse_overrides(["train.grad_clip=2", "train.activation_checkpointing=yes", "train.weight_decay=1e-2",
                                              "rollout.engine_options={router_noise: 2e-1}"]))
    assert suite.train.lr == 1e-3 and suite.collapse.reward_floor == 0.02 and suite.budget.value == 3.0
    assert suite.train.grad_clip == 2.0 and isinstance(suite.train.grad_clip, float)
    assert suite.train.activation_checkpointing is True and suite.train.weight_decay == 0.01
    # free-form settings are not converted by the schema: YAML itself reads 1e-1 as the number
    assert suite.objectives[0].params == {"delta": 0.1} and suite.rollout.engine_options == {"router_noise": 0.2}


def test_a_boolean_is_refused_wherever_a_number_is_expected_in_any_section(tmp_path):
    """The rule goes by a field's type: every int or float field of every section (fields added later
    too), inside tuples, lists, dicts and optional fields; free-form task params by the task's own
    signature."""
    from gspo_bench.config.numbers import boolean_numbers
    from gspo_bench.config.schema import Strict, SuiteConfig

    assert boolean_numbers(int, True) == [""] and boolean_numbers(float | None, False) == [""]
    assert boolean_numbers(tuple[float, float], [0.9, True]) == ["1"] and boolean_numbers(list[int], [0, 1]) == []
    assert boolean_numbers(dict[str, list[float]], {"a": [1.0, True]}) == ["a.1"]
    assert boolean_numbers(bool | None, True) == [] and boolean_numbers(int | bool, True) == []
    assert boolean_numbers(float, 1) == [] and boolean_numbers(str, True) == []

    class Later(Strict):  # a section written after this rule, by someone who never heard of it
        micro_batch_tokens: int | None = None
        scales: tuple[float, ...] = ()

    with pytest.raises(ValueError, match=r"micro_batch_tokens\s+Value error, expected a number, got a boolean"):
        Later(micro_batch_tokens=True)
    with pytest.raises(ValueError, match=r"scales\s+Value error, expected a number, got a boolean at 0"):
        Later(scales=[True])
    assert Later(micro_batch_tokens=4096, scales=[1, 2.5]).scales == (1.0, 2.5)
    sections = [f for f in SuiteConfig.model_fields.values() if isinstance(f.annotation, type)
                and issubclass(f.annotation, Strict)]
    assert len(sections) >= 8


def test_every_registered_task_objective_and_correction_has_hints_the_rule_reads():
    from gspo_bench.config.numbers import setting_booleans
    from gspo_bench.objectives import get_objective, list_objectives
    from gspo_bench.objectives.corrections import get_correction, list_corrections
    from gspo_bench.tasks import list_tasks
    from gspo_bench.tasks.registry import task_spec

    functions = [task_spec(n).factory for n in list_tasks()] + [get_objective(n) for n in list_objectives()]
    for function in functions + [get_correction(n) for n in list_corrections()]:
        assert setting_booleans(function, {"x": True}) == []  # no such argument: nothing expected of it
    assert setting_booleans(task_spec("countdown").factory, {"count": True, "seed": 3}) == ["count"]


# ------------------------------------------------------------------ sizes and seeds

def test_the_largest_seed_runs(tmp_path, cli):
    """The bound on seeds is one every generator of a run takes: a run at the largest seed trains."""
    data = tiny_suite(tmp_path / "cache", objectives=[{"name": "grpo"}], warm_start={"enabled": False},
                      budget={"kind": "steps", "value": 1}, seeds=[2**32 - 1])
    result = cli("run", write_suite(tmp_path / "s.yaml", data), "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "tiny" / f"grpo-s{2**32 - 1}" / "checkpoint" / "state.pt").is_file()


def test_an_alias_bomb_is_refused_and_ordinary_aliases_are_read(tmp_path):
    text = yaml.safe_dump(tiny_suite(tmp_path / "cache", task=bomb()))
    assert len(text) < 3000 and text.count("*") >= 70  # a small file: anchors and aliases, as written
    with pytest.raises(SuiteError, match=r"s\.yaml: YAML aliases expand to more than 100000 values"):
        load_suite(write_suite(tmp_path / "s.yaml", tiny_suite(tmp_path / "cache", task=bomb())))
    with pytest.raises(SuiteError, match="--set task.params: YAML aliases expand to more than"):
        parse_overrides([f"task.params={yaml.safe_dump(bomb()['params'], default_flow_style=True)}"])
    data = tiny_suite(tmp_path / "cache")
    data.pop("objectives")
    path = tmp_path / "aliases.yaml"
    path.write_text(yaml.safe_dump(data) + "objectives:\n- &base {name: grpo, lr: 2.0e-3}\n- {<<: *base, name: gspo}\n")
    suite = load_suite(path)
    assert [(o.name, o.lr) for o in suite.objectives] == [("grpo", 2e-3), ("gspo", 2e-3)]


def test_a_repeated_yaml_key_is_refused_naming_the_key_and_its_lines(tmp_path, cli):
    """YAML lets the last of two equal keys win silently; every YAML a user gives (a suite file, a --set
    value, --tolerances, a run's config.yaml) is read by one reader that refuses it. A merge key's
    values overridden by the mapping's own (`<<: *base`) are not repeats."""
    data = tiny_suite(tmp_path / "cache")
    data.pop("train")
    text = yaml.safe_dump(data) + "train:\n  lr: 1.0e-3\n  minibatches: 2\n  lr: 2.0e-3\n"
    line = text.splitlines().index("  lr: 2.0e-3") + 1
    error = one_line_error(cli("validate", write_suite(tmp_path / "s.yaml", text.encode())))
    assert f"key 'lr' repeated (first at line {line - 2}) (line {line}, column 3)" in error and "s.yaml" in error
    with pytest.raises(SuiteError, match="--set train: not valid YAML: key 'lr' repeated"):
        parse_overrides(["train={lr: 1, lr: 2}"])
    from gspo_bench.config.yamlread import read_yaml

    merged = read_yaml("base: &b {lr: 1.0e-3, minibatches: 2}\ntrain: {<<: *b, lr: 2.0e-3}\n")
    assert merged["train"] == {"lr": 2e-3, "minibatches": 2}
    with pytest.raises(ValueError, match=r"key 'x' repeated \(first at line 1\) \(line 3, column 1\)"):
        read_yaml("x: 1\ny: 2\nx: 3\n")


def test_a_suite_file_that_is_not_text_is_named(tmp_path, cli):
    binary = write_suite(tmp_path / "s.yaml", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    for command in (["validate", binary], ["run", binary, "--out", tmp_path / "out"]):
        output = one_line_error(cli(*command))
        assert str(binary) in output and "not a UTF-8 text file" in output
    control = write_suite(tmp_path / "c.yaml", b"name: \x07tiny\n")
    output = one_line_error(cli("validate", control))
    assert str(control) in output and "not valid YAML" in output and "line 1" in output


def test_parse_suite_and_set_make_the_same_checks(tmp_path):
    """One set of checks, whichever way a suite is made: from a file, with --set, at a sweep point."""
    data = tiny_suite(tmp_path / "cache", **TWO)
    with pytest.raises(SuiteError, match="labels must be unique"):
        parse_suite({**data, "objectives": [{"name": "grpo"}, {"name": "gspo", "label": "grpo"}]}, "s.yaml")
    path = write_suite(tmp_path / "s.yaml", data)
    with pytest.raises(SuiteError, match=r"s\.yaml with --set objectives\.1\.label=grpo: objectives.0 \(grpo\)"):
        load_suite(path, parse_overrides(["objectives.1.label=grpo"]))


def test_run_with_ray_missing_is_refused_before_the_warm_start(tmp_path, cli, monkeypatch):
    """Ray is installed here: its absence is simulated (an import of `ray` fails). `run --ray` refuses in
    one line before any compute: no warm start (the cache stays absent), no results folder."""
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    suite = write_suite(tmp_path / "s.yaml", tiny_suite(tmp_path / "cache"))
    for flags in (["--ray"], ["--ray-address", "auto"]):
        error = one_line_error(cli("run", suite, *flags, "--out", tmp_path / "out"))
        assert "--ray needs Ray: pip install -e '.[ray]'" in error
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("seeds", ["-1", "99999999999", "0,4294967296"])
def test_seeds_on_the_command_line_keep_the_suites_seed_bounds(tmp_path, cli, seeds):
    """`--seeds` once skipped the bounds of `seeds:` (0..MAX_SEED): refused as a usage error naming the
    option and the bound, before any compute."""
    import typer

    from gspo_bench.cli import parse_seeds
    from gspo_bench.config.schema import MAX_SEED

    with pytest.raises(typer.BadParameter, match=f"0..{MAX_SEED}"):
        parse_seeds(seeds)
    suite = write_suite(tmp_path / "s.yaml", tiny_suite(tmp_path / "cache", objectives=[{"name": "grpo"}]))
    result = cli("run", suite, f"--seeds={seeds}", "--out", tmp_path / "out")  # a usage error, as --seeds abc
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "--seeds" in result.output and f"0..{MAX_SEED}" in result.output
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("source", ["warm_start.cache_dir", "GSPO_BENCH_CACHE"])
def test_a_warm_start_cache_that_cannot_be_written_is_named_before_any_compute(tmp_path, cli, monkeypatch, source):
    """The cache under a file (a folder cannot be made there, even by root): `validate` and `run` name the
    cache and where it was set, not --out, before the warm start; nothing is written."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cache = blocker / "cache"
    data = tiny_suite(cache)
    if source == "GSPO_BENCH_CACHE":
        data["warm_start"].pop("cache_dir")
        monkeypatch.setenv("GSPO_BENCH_CACHE", str(cache))
    suite = write_suite(tmp_path / "s.yaml", data)
    validated = one_line_error(cli("validate", suite))
    ran = one_line_error(cli("run", suite, "--out", tmp_path / "out"))
    assert validated == ran and f"{source}: the warm-start cache {cache} cannot be written: {blocker} is a file" in ran
    assert "--out" not in ran and not (tmp_path / "out").exists()


def test_the_bounds_of_degenerate_settings_are_stated_in_their_descriptions():
    from gspo_bench.config import EvalConfig, ModelConfig, RolloutConfig

    assert "0.001..1000" in ModelConfig.model_fields["router_scale"].description
    assert "0.01..100" in RolloutConfig.model_fields["temperature"].description
    assert "0.01..100" in EvalConfig.model_fields["temperature"].description


@pytest.mark.parametrize(("options", "shown"), [
    (["--samples", "99999"], "--samples: Input should be less than or equal to 4096 (got 99999)"),
    (["--limit", "10000000"], "--limit: Input should be less than or equal to 65536 (got 10000000)"),
    (["--temperature", "1e-9"], "--temperature: Input should be greater than or equal to 0.01 (got 1e-09)"),
    (["--max-new-tokens", "999999999"], "--max-new-tokens: Input should be less than or equal to 131072"),
    (["--greedy", "--samples", "2"], "--greedy, --samples: greedy decoding gives one response per prompt"),
])
def test_eval_option_errors_name_the_option(tmp_path, cli, options, shown):
    """`gspo-bench eval` checks its options with EvalConfig: each problem names the command-line option
    (pydantic's message alone named nothing), before any model is read."""
    error = one_line_error(cli("eval", tmp_path, "--tasks", "sort", *options))
    assert shown in error, error


@pytest.mark.parametrize(("kind", "shown"), [
    ("missing", "no such file"),
    ("device", "a device, not a file: give the suite's YAML file"),
    ("fifo", "a named pipe (FIFO), not a file: give the suite's YAML file"),
    ("loop", "a symbolic link loop"),
    ("dangling", "a symbolic link to a missing file"),
])
def test_validate_says_what_a_suite_path_that_is_no_file_is(tmp_path, cli, kind, shown):
    """`validate /dev/null` once said "no such file"; so did a FIFO (which reading would block on) and a
    symbolic link loop."""
    import os

    path = tmp_path / "s.yaml"
    if kind == "device":
        path = Path("/dev/null")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "loop":
        (tmp_path / "other.yaml").symlink_to(path)
        path.symlink_to(tmp_path / "other.yaml")
    elif kind == "dangling":
        path.symlink_to(tmp_path / "gone.yaml")
    error = one_line_error(cli("validate", path))
    assert f"{path}: {shown}" in error, error


def test_a_load_balancing_loss_the_update_never_adds_is_refused(tmp_path):
    """`model.aux_loss: true` made the model compute router logits and its load-balancing loss, which the update
    never read (the objective's loss is the whole loss): a setting that changed nothing the run trained on.
    Refused in one line, pointing to model.router_aux_loss_coef, through which the update adds it."""
    from gspo_bench.config import SuiteError

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny_suite(tmp_path / "cache")))
    with pytest.raises(SuiteError, match="model.aux_loss: aux_loss: true would change nothing the run trains on; the "
                                         "load-balancing loss enters the update through model.router_aux_loss_coef"):
        load_suite(path, parse_overrides(["model.aux_loss=true"]))
    assert load_suite(path, parse_overrides(["model.aux_loss=false"])).model.aux_loss is False



@pytest.mark.parametrize("kind", ["tis", "mis", "icepop"])
def test_a_correction_by_pi_old_over_mu_is_refused_where_pi_old_is_the_samplers_own(tmp_path, kind):
    """With `train.old_logp: rollout` pi_old is the sampler's mu, so tis, mis and icepop (weight rho = pi_old / mu)
    weigh every token by 1: an arm that changes nothing, refused in one line naming the correction. OPSM, which
    compares the current policy with mu, and the default recompute stay valid."""
    path = tmp_path / "s.yaml"
    data = tiny_suite(tmp_path / "cache", objectives=[{"name": "grpo", "correction": {"kind": kind}}])
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SuiteError, match=f"correction {kind}'s weight pi_old / mu is 1 on every token"):
        load_suite(path, parse_overrides(["train.old_logp=rollout"]))
    assert load_suite(path).objectives[0].correction["kind"] == kind  # recompute: the correction sees the mismatch
    data["objectives"] = [{"name": "grpo", "correction": {"kind": "opsm"}}]
    path.write_text(yaml.safe_dump(data))
    assert load_suite(path, parse_overrides(["train.old_logp=rollout"])).train.old_logp == "rollout"
