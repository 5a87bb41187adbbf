"""Real use: a Hugging Face dataset from local files, chat templates in rollout / warm start /
evaluation, TensorBoard and W&B tracking read back, standard lm-eval tasks by name."""

from __future__ import annotations

import glob
import struct
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from typer.testing import CliRunner

from gspo_bench.cli import app
from gspo_bench.config import EvalConfig, SuiteError, TrackingConfig, parse_suite
from gspo_bench.models import build_char_tokenizer, build_tiny_moe
from gspo_bench.models.chat import TINY_CHAT_TEMPLATE, PromptFormat, resolve_prompt_format
from gspo_bench.rollout import SamplingParams, left_pad, make_engine
from gspo_bench.suite.preflight import check_runnable
from gspo_bench.tasks import make_task
from gspo_bench.train.evaluation import Evaluator
from gspo_bench.train.policy import Policy
from gspo_bench.train.rollout import collect_rollout, draw_examples
from gspo_bench.train.warmstart import sft_batch
from tests.helpers.runs import run_suite, tiny_suite
from tests.helpers.scripts import script

CHAT = PromptFormat(chat=True, system_prompt="be brief")


def arith_records(pairs) -> pd.DataFrame:
    return pd.DataFrame([{"question": f"what is {a}+{b}?", "answer": f"{a}+{b}={a + b}\n#### {a + b}"}
                         for a, b in pairs])


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """A local dataset directory in GSM8K's layout: train-*.parquet (12 records), test-*.parquet (4)."""
    path = tmp_path_factory.mktemp("data") / "arith"
    path.mkdir()
    arith_records([(a, b) for a in range(3) for b in range(4)]).to_parquet(path / "train-00000-of-00001.parquet")
    arith_records([(7, 1), (8, 1), (9, 0), (6, 3)]).to_parquet(path / "test-00000-of-00001.parquet")
    return path


def hf_task(path, **params) -> dict:
    return {"name": "hf_dataset", "params": {"path": str(path), "answer_pattern": "#### (.+)$", **params}}


def chat_tokenizer():
    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    return tokenizer


# ------------------------------------------------------------------ hf_dataset

def test_hf_dataset_reads_the_splits_of_a_local_parquet_dataset_and_extracts_the_answer(dataset):
    task = make_task("hf_dataset", **hf_task(dataset)["params"])
    assert len(task._train) == 12 and task._train[5].prompt == "what is 1+1?" and task._train[5].answer == "2"
    assert [(e.prompt, e.answer) for e in task.test_examples(10)] == [
        ("what is 7+1?", "8"), ("what is 8+1?", "9"), ("what is 9+0?", "9"), ("what is 6+3?", "9")]
    example = task.test_examples(1)[0]
    assert task.reward("8", example) == 1.0 and task.reward("the sum is 8", example) == 1.0
    assert task.reward("7", example) == 0.0 and task.reward("", example) == 0.0


def test_hf_dataset_from_one_file_without_a_test_split_splits_by_prompt_hash(tmp_path):
    arith_records([(a, b) for a in range(10) for b in range(10)]).to_parquet(tmp_path / "all.parquet")
    task = make_task("hf_dataset", path=str(tmp_path / "all.parquet"), test_split=None, test_share=0.2,
                     answer_pattern="#### (.+)$")
    train, test = {e.prompt for e in task._train}, {e.prompt for e in task.test_examples(100)}
    assert len(train) + len(test) == 100 and not train & test and 10 <= len(test) <= 30


def test_hf_dataset_reads_its_file_when_built_and_leaves_datasets_as_it_found_it(tmp_path):
    """No cache outlives a task: a task built after the file changed reads the new records. Loading
    quiets datasets' log and progress bars for the load only."""
    import datasets

    path = tmp_path / "all.parquet"
    arith_records([(a, b) for a in range(10) for b in range(10)]).to_parquet(path)
    build = lambda: make_task("hf_dataset", path=str(path), test_split=None, answer_pattern="#### (.+)$")  # noqa: E731
    datasets.logging.set_verbosity_info()
    datasets.enable_progress_bars()
    try:
        first = build()
        assert datasets.logging.get_verbosity() == datasets.logging.INFO and datasets.is_progress_bar_enabled()
    finally:
        datasets.logging.set_verbosity_warning()
    arith_records([(a, b) for a in range(20, 30) for b in range(10)]).to_parquet(path)
    second = build()
    assert len(first._train) + len(first._test) == len(second._train) + len(second._test) == 100
    assert {e.prompt for e in first._train}.isdisjoint(e.prompt for e in second._train)


@pytest.mark.parametrize("params, named", [
    ({"prompt_field": "problem"}, "no field 'problem'; its fields: question, answer"),
    ({"answer_field": "solution"}, "no field 'solution'"),
    ({"test_split": "validation"}, "no split 'validation'; its splits: train, test"),
    ({"path": "missing/dir"}, "'missing/dir' cannot be loaded"),
    ({"path": "missing.parquet"}, "'missing.parquet': no such file"),
    ({"answer_pattern": "@@ (.+)$"}, "answer_pattern '@@ (.+)$' does not match field 'answer'"),
])
def test_hf_dataset_errors_name_the_dataset_and_the_field_without_a_traceback(dataset, tmp_path, params, named):
    task = hf_task(dataset)
    task["params"].update(params)
    suite = tmp_path / "s.yaml"
    suite.write_text(yaml.safe_dump(tiny_suite(tmp_path / "cache", task=task)))
    result = CliRunner().invoke(app, ["validate", str(suite)])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    output = " ".join(result.output.split())  # rich wraps long lines
    assert "hf_dataset" in output and named in output
    assert str(params.get("path", dataset)) in output


# ------------------------------------------------------------------ chat templates

def test_a_chat_prompt_is_the_tokenizers_template_with_system_prompt_and_generation_prompt():
    tokenizer = chat_tokenizer()
    assert CHAT.render(tokenizer, "what is 3+4?") == "<system>be brief<user>what is 3+4?<assistant>"
    assert PromptFormat().render(tokenizer, "what is 3+4?") == "what is 3+4?"
    assert tokenizer.decode(CHAT.encode(tokenizer, "3+4")) == "<system>be brief<user>3+4<assistant>"


def test_chat_template_default_is_on_for_a_real_tokenizer_with_one_and_off_for_tiny_models():
    with_template, without = chat_tokenizer(), build_char_tokenizer()
    assert resolve_prompt_format(None, None, with_template, tiny=False).chat
    assert not resolve_prompt_format(None, None, with_template, tiny=True).chat
    assert not resolve_prompt_format(None, None, without, tiny=False).chat
    assert resolve_prompt_format(True, "hi", with_template, tiny=True) == PromptFormat(True, "hi")
    with pytest.raises(ValueError, match="tokenizer of ckpt has no chat template"):
        resolve_prompt_format(True, None, without, tiny=False, source="ckpt")


def test_rollout_and_warm_start_see_the_rendered_prompt():
    tokenizer = chat_tokenizer()
    task = make_task("sort", max_len=3)
    model = build_tiny_moe(vocab_size=len(tokenizer), num_layers=2, hidden_size=32, expert_hidden=32, num_experts=4)
    examples = draw_examples(task, 2, 0)
    batch = collect_rollout(Policy(model), make_engine("hf", pad_id=0, eos_id=2), tokenizer, task, examples,
                            SamplingParams(group_size=2, max_new_tokens=4, seed=0), prompt_format=CHAT)
    prompts = tokenizer.batch_decode(batch.input_ids[:, :-batch.n_response], skip_special_tokens=True)
    assert prompts == [CHAT.render(tokenizer, ex.prompt) for ex in examples for _ in range(2)]
    ids, _, target = sft_batch(tokenizer, examples, CHAT)
    rows = tokenizer.batch_decode(ids, skip_special_tokens=True)
    assert rows == [CHAT.render(tokenizer, ex.prompt) + ex.answer for ex in examples]
    answers = [tokenizer.decode(ids[i, 1:][target[i]], skip_special_tokens=True) for i in range(2)]
    assert answers == [ex.answer for ex in examples]  # the loss is on the answer only, never the template


def test_warm_start_fine_tunes_on_prompts_in_the_rollouts_format(monkeypatch):
    from gspo_bench.train import warmstart

    tokenizer = chat_tokenizer()
    model = build_tiny_moe(vocab_size=len(tokenizer), num_layers=2, hidden_size=32, expert_hidden=32, num_experts=4)
    formats, batch = [], warmstart.sft_batch
    monkeypatch.setattr(warmstart, "sft_batch", lambda tok, ex, fmt=PromptFormat(): formats.append(fmt) or batch(tok, ex, fmt))
    params = warmstart.WarmStartParams(batch_size=4, max_steps=2, eval_every=1, eval_examples=2, band=(1.0, 1.0),
                                       max_new_tokens=2, prompt_format=CHAT)
    with pytest.raises(warmstart.WarmStartError):
        warmstart.finetune(model, tokenizer, make_task("sort", max_len=3), params)
    assert formats == [CHAT, CHAT]


def test_evaluation_renders_prompts_with_the_same_chat_template(tmp_path, monkeypatch):
    tokenizer = chat_tokenizer()
    model = build_tiny_moe(vocab_size=len(tokenizer), num_layers=2, hidden_size=32, expert_hidden=32, num_experts=4)
    seen = []
    generate = model.generate

    def recording_generate(*args, **kwargs):
        seen.extend(tokenizer.batch_decode(kwargs["input_ids"], skip_special_tokens=True))
        return generate(*args, **kwargs)

    monkeypatch.setattr(model, "generate", recording_generate)
    cfg = EvalConfig(tasks=["sort"], limit=3, greedy=True, max_new_tokens=4)
    evaluator = Evaluator(cfg, tmp_path, "sort", {"max_len": 3}, prompt_format=CHAT)
    evaluator(model, tokenizer)
    examples = make_task("sort", max_len=3).test_examples(3)
    assert sorted(seen) == sorted(CHAT.render(tokenizer, ex.prompt) for ex in examples)


# ------------------------------------------------------------------ tracking

def read_wandb_offline(run_file: Path) -> list[dict]:
    """The history rows of a W&B offline run file (.wandb: a LevelDB-style log of protobuf records)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block, pos = run_file.read_bytes(), 32768, 7  # 7 bytes: ":W&B", magic, version
    rows, parts = [], []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        parts.append(data[pos + 7:pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = pb.Record()
            record.ParseFromString(b"".join(parts))
            parts = []
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): yaml.safe_load(item.value_json)
                             for item in record.history.item})
    return rows


@pytest.mark.slow
def test_a_suite_on_a_local_dataset_with_chat_template_logs_every_step_to_tensorboard_and_wandb(dataset, tmp_path,
                                                                                                monkeypatch, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from gspo_bench.rollout.hf import HFEngine

    prompts, generate = [], HFEngine.generate  # every prompt the engine samples for: warm start and rollout

    def recording(self, model, ids, params):
        prompts.extend(ids)
        return generate(self, model, ids, params)

    monkeypatch.setattr(HFEngine, "generate", recording)

    data = tiny_suite(tmp_path / "cache", task=hf_task(dataset), objectives=[{"name": "gspo"}],
                      warm_start={"enabled": False}, budget={"kind": "steps", "value": 3},
                      rollout={"chat_template": True, "system_prompt": "be brief", "max_new_tokens": 4},
                      eval={"tasks": ["hf_dataset"], "every": 2, "limit": 4},
                      tracking={"tensorboard": True, "wandb": {"project": "gspo-bench-test", "mode": "offline"}})
    statuses = run_suite(data, tmp_path / "out")
    assert statuses["gspo-s0"]["status"] == "done"
    run = tmp_path / "out" / "tiny" / "gspo-s0"
    rows = pd.read_parquet(run / "metrics.parquet")
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    for column in ("reward/mean", "loss", "clip/frac", "moe/drift_expert", "compute/cum_flops", "ratio/seq_var"):
        logged = events.Scalars(column)
        assert [e.step for e in logged] == rows["step"].tolist(), column
        assert [e.value for e in logged] == pytest.approx(rows[column].tolist(), rel=1e-6), column
    evals = pd.read_parquet(run / "eval.parquet")
    logged = events.Scalars("eval/gspo_hf_dataset")
    assert [e.step for e in logged] == evals["step"].tolist() == [0, 2, 3]
    assert [e.value for e in logged] == pytest.approx(evals["score"].tolist())
    assert "replay" not in events.Tags()["scalars"] and "step" not in events.Tags()["scalars"]
    history = read_wandb_offline(Path(glob.glob(str(run / "wandb" / "offline-run-*" / "run-*.wandb"))[0]))
    steps = [h for h in history if "reward/mean" in h]
    assert [h["_step"] for h in steps] == rows["step"].tolist()
    assert [h["reward/mean"] for h in steps] == pytest.approx(rows["reward/mean"].tolist())
    tokenizer = chat_tokenizer()
    assert len(prompts) == 4 + 3 * 2  # warm start checks accuracy on the 4 test records, then 3 steps of 2 prompts
    assert all(tokenizer.decode(p, skip_special_tokens=True).startswith("<system>be brief<user>") for p in prompts)
    # experiments/read_tensorboard.py reads the same events back beside metrics.parquet
    read = script("read_tensorboard.py").read

    read(run, ["reward/mean", "eval/gspo_hf_dataset"])
    printed = capsys.readouterr().out
    assert "reward/mean: [(1, " in printed and "equal to metrics.parquet: True" in printed
    assert f"eval/gspo_hf_dataset: [(0, {round(evals['score'].iloc[0], 4)})" in printed


def test_a_configured_tracker_that_is_not_installed_is_refused_before_any_compute(tmp_path, monkeypatch):
    import importlib

    real = importlib.import_module

    def no_wandb(name, *args):
        if name == "wandb":
            raise ImportError("no wandb")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_wandb)
    suite = parse_suite(tiny_suite(tmp_path, tracking={"wandb": {"project": "p"}}))
    with pytest.raises(SuiteError, match=r"tracking: tracking.wandb is on, but wandb is not installed: pip install"):
        check_runnable(suite, "s.yaml")
    assert TrackingConfig().tensorboard is False and TrackingConfig().wandb is None


# ------------------------------------------------------------------ standard lm-eval tasks by name

STANDARD_TASK = """\
task: {name}
dataset_path: json
dataset_kwargs: {{data_files: {{test: {data}}}}}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs: {{until: ["</s>"], do_sample: false, max_gen_toks: 8}}
metric_list: [{{metric: exact_match, aggregation: mean, higher_is_better: true}}]
metadata: {{version: 1}}
"""


def test_lm_eval_tasks_are_passed_by_name_to_lm_eval_with_its_own_metric(tmp_path):
    """A task config in a local include path that mimics a standard one (GSM8K's question/answer
    fields, lm-eval's exact_match): scored by lm-eval, not by our verifier."""
    tokenizer = build_char_tokenizer()
    model = build_tiny_moe(vocab_size=len(tokenizer), num_layers=2, hidden_size=32, expert_hidden=32, num_experts=4)
    examples = make_task("sort", max_len=3).test_examples(6)
    include = tmp_path / "tasks"
    include.mkdir()
    ids, mask = left_pad([tokenizer.encode(ex.prompt) for ex in examples], tokenizer.pad_token_id)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=8, eos_token_id=2,
                             pad_token_id=0)
    greedy = tokenizer.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True)
    answers = [g if i % 2 == 0 else g + "x" for i, g in enumerate(greedy)]  # half of the targets are the model's
    pd.DataFrame({"question": [ex.prompt for ex in examples], "answer": answers}).to_json(
        include / "mini_gsm.jsonl", orient="records", lines=True)
    (include / "mini_gsm.yaml").write_text(STANDARD_TASK.format(name="mini_gsm", data=include / "mini_gsm.jsonl"))
    suite = parse_suite(tiny_suite(tmp_path, eval={"lm_eval_tasks": ["mini_gsm"], "lm_eval_include": str(include)}))
    check_runnable(suite, "s.yaml")
    scores = Evaluator(suite.eval, tmp_path / "ours")(model, tokenizer)
    assert list(scores) == ["mini_gsm"] and scores["mini_gsm"]["metric"].startswith("exact_match")
    assert scores["mini_gsm"]["score"] == pytest.approx(0.5)
    limited = parse_suite(tiny_suite(tmp_path, eval={"lm_eval_tasks": ["mini_gsm"], "lm_eval_include": str(include),
                                                     "limit": 1}))
    assert Evaluator(limited.eval, tmp_path / "ours1")(model, tokenizer)["mini_gsm"]["score"] == 1.0  # doc 0 only
    unknown = parse_suite(tiny_suite(tmp_path, eval={"lm_eval_tasks": ["no_such_task"], "lm_eval_include": str(include)}))
    with pytest.raises(SuiteError, match=r"eval.lm_eval_tasks: \['no_such_task'\] not in lm-eval's task registry"):
        check_runnable(unknown, "s.yaml")


def test_tracking_settings_may_change_on_resume_and_nothing_else_is_ignored(tmp_path):

    from gspo_bench.config.run import RunSpec, config_changes, resolved_config

    def spec(**changes):
        suite = parse_suite(tiny_suite(tmp_path / "cache", **changes))
        return RunSpec(suite=suite, entry=suite.objectives[0], seed=0, run_dir=Path("unused"))

    (tmp_path / "config.yaml").write_text(resolved_config(spec()))
    assert config_changes(tmp_path, spec(tracking={"tensorboard": True})) == []
    assert config_changes(tmp_path, spec(rollout={"max_new_tokens": 9})) == ["suite.rollout.max_new_tokens: 8 -> 9"]


def test_a_field_added_after_a_run_started_is_no_change_at_its_default(tmp_path):
    """A run recorded before a suite field existed resumes when the field holds its default; set
    otherwise, the change is named."""

    import yaml

    from gspo_bench.config.run import RunSpec, config_changes, resolved_config

    def spec(**changes):
        suite = parse_suite(tiny_suite(tmp_path / "cache", **changes))
        return RunSpec(suite=suite, entry=suite.objectives[0], seed=0, run_dir=Path("unused"))

    recorded = yaml.safe_load(resolved_config(spec()))
    del recorded["suite"]["train"]["router_lr_scale"], recorded["suite"]["model"]["router_scale"]  # an older run
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(recorded))
    assert config_changes(tmp_path, spec()) == []
    assert config_changes(tmp_path, spec(train={"router_lr_scale": 2.0})) == ["suite.train.router_lr_scale: None -> 2.0"]


def test_the_warm_start_cache_key_holds_the_chat_format(tmp_path, monkeypatch):
    import gspo_bench.train.warmstart
    from gspo_bench.suite.runner import starting_weights

    keys = []

    def fake_warm_start(build, tokenizer, task, params, key_parts, cache, on_eval, shipped=None):
        keys.append(key_parts)
        return None, {"path": str(tmp_path), "cached": True, "accuracy": 0.0, "steps": 0}

    monkeypatch.setattr(gspo_bench.train.warmstart, "warm_start", fake_warm_start)
    for rollout in ({}, {"chat_template": True}, {"chat_template": True, "system_prompt": "be brief"}):
        starting_weights(parse_suite(tiny_suite(tmp_path / "cache", rollout=rollout)), 0, log=lambda m: None)
    assert "prompt_format" not in keys[0]  # raw prompts: the key (and the cache) of before chat templates
    assert keys[1]["prompt_format"] == {"chat": True, "system_prompt": None}
    assert keys[2]["prompt_format"]["system_prompt"] == "be brief"


def test_a_resumed_run_replaces_the_tensorboard_steps_a_crash_left_after_its_checkpoint(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from gspo_bench.train.tracking import Tracker

    cfg = TrackingConfig(tensorboard=True)
    first = Tracker(cfg, tmp_path, "suite", {}, resume_step=0)
    for step in (1, 2, 3):  # checkpoint at step 2, crash after step 3
        first.log_row({"step": step, "reward/mean": float(step)})
    first.close()
    resumed = Tracker(cfg, tmp_path, "suite", {}, resume_step=2)
    resumed.log_row({"step": 3, "reward/mean": 30.0})
    resumed.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("reward/mean")] == [(1, 1.0), (2, 2.0), (3, 30.0)]


def test_a_warm_start_on_a_missing_cuda_device_says_so_and_the_device_reaches_it(tmp_path, monkeypatch):
    from gspo_bench.config import parse_suite
    from gspo_bench.suite.runner import starting_weights
    from gspo_bench.train import warmstart

    tokenizer = chat_tokenizer()
    model = build_tiny_moe(vocab_size=len(tokenizer), num_layers=2, hidden_size=32, expert_hidden=32, num_experts=4)
    params = warmstart.WarmStartParams(max_steps=1, device="cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="warm_start.device: cuda, but this machine has no CUDA device"):
        warmstart.finetune(model, tokenizer, make_task("sort", max_len=3), params)
    seen = []
    monkeypatch.setattr(warmstart, "finetune", lambda model, tok, task, params, on_eval=None: seen.append(params.device)
                        or (_ for _ in ()).throw(warmstart.WarmStartError("stop here")))
    suite = parse_suite(tiny_suite(tmp_path / "cache", warm_start={"device": "cuda:1"}))
    with pytest.raises(warmstart.WarmStartError):
        starting_weights(suite, 0, log=lambda m: None)
    assert seen == ["cuda:1"]
