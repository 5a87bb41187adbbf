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

sys.path.insert(0, str(Path(__file__).parent))
from test_harness import tiny_suite  # noqa: E402
from test_reliability_inputs import one_line_error  # noqa: E402


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


# (changes to test_harness.tiny_suite, --set items, what the one error line says)
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
    case({"objectives": [{"name": "dppo_binary_tv", "kwargs": {"delta": True}}]}, [], "objectives.0: kwargs: expected "
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
    case({"rollout": {"engine": "sglang"}}, [], "rollout.engine", id="engine-name"),
    case({"seeds": [0, 0]}, [], "seeds", id="seeds-distinct"),
    *(case({"name": name}, [], "name: a suite name is a folder name", id=f"suite-name-{i}")
      for i, name in enumerate(["..", ".", "a/b", "x" * (MAX_NAME + 1), ""])),
    case({"sweep": {"train.lr": [1e-4, 1e-4]}}, [], "sweep points 1 (train.lr=0.0001) and 2 (train.lr=0.0001)",
         id="sweep-labels"),
    case({"objectives": [{"name": "grpo"}, {"name": "gspo", "label": "GRPO"}]}, [], "objectives.0 (grpo) and "
         "objectives.1 (GRPO)", id="label-case"),
    case({"objectives": [{"name": "grpo", "correction": {"kind": "opsm", "delta": math.nan}}]}, [],
         "objectives.0.correction: delta = nan", id="nan-correction"),
    case({"budget": {"kind": "steps", "value": math.inf}}, [], "budget.value: Input should be a finite number",
         id="inf-budget"),
    case({"train": {"lr": math.nan}}, [], "train.lr: Input should be a finite number", id="nan-lr"),
    case({"train": {"betas": [0.9, math.inf]}}, [], "train.betas.1: Input should be a finite number", id="inf-betas"),
    case({"warm_start": {"band": [math.nan, 0.5]}}, [], "warm_start.band.0: Input should be a finite number",
         id="nan-band"),
    case({"objectives": [{"name": "dppo_binary_tv", "kwargs": {"delta": -math.inf}}]}, [], "kwargs: delta = -inf",
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
    suite = load_suite(path, parse_overrides(["train.grad_clip=2", "model.aux_loss=yes", "train.weight_decay=1e-2",
                                              "rollout.engine_options={router_noise: 2e-1}"]))
    assert suite.train.lr == 1e-3 and suite.collapse.reward_floor == 0.02 and suite.budget.value == 3.0
    assert suite.train.grad_clip == 2.0 and isinstance(suite.train.grad_clip, float)
    assert suite.model.aux_loss is True and suite.train.weight_decay == 0.01
    # free-form settings are not converted by the schema: YAML itself reads 1e-1 as the number
    assert suite.objectives[0].kwargs == {"delta": 0.1} and suite.rollout.engine_options == {"router_noise": 0.2}


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
