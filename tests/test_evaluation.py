"""Held-out evaluation through lm-eval: task files, scores equal to a direct computation, eval in runs."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from gspo_bench.cli import app
from gspo_bench.config import parse_suite
from gspo_bench.rollout import left_pad
from gspo_bench.suite.runner import starting_weights
from gspo_bench.tasks import make_task
from gspo_bench.train.evaluation import OFFLINE, evaluate, lm_eval_scope, write_task_files
from tests.helpers.runs import run_suite, tiny_suite


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A warm-started tiny MoE (sorting), loaded from the warm-start cache."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cache = tmp_path_factory.mktemp("ws")
    suite = parse_suite(tiny_suite(cache))
    path = starting_weights(suite, 0, log=lambda m: None)
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path), cache


def direct_greedy_score(model, tokenizer, task, examples, max_new_tokens):
    ids, mask = left_pad([tokenizer.encode(ex.prompt) for ex in examples], tokenizer.pad_token_id)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new_tokens,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    texts = tokenizer.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True)
    return sum(task.reward(t, ex) for t, ex in zip(texts, examples)) / len(examples)


def test_lm_eval_score_equals_direct_computation(trained, tmp_path):
    model, tokenizer, _ = trained
    model.eval()
    name = write_task_files(tmp_path, "sort", {"max_len": 3}, limit=24, greedy=True, max_new_tokens=8)
    assert name == "gspo_sort" and (tmp_path / "gspo_sort.yaml").is_file()
    assert len((tmp_path / "gspo_sort.jsonl").read_text().splitlines()) == 24
    scores = evaluate(model, tokenizer, [name], tmp_path, batch_size=8)
    task = make_task("sort", max_len=3)
    direct = direct_greedy_score(model, tokenizer, task, task.test_examples(24), 8)
    assert scores[name]["score"] == pytest.approx(direct)
    assert 0.0 < direct < 1.0  # a trained but imperfect model: the comparison is not trivial
    assert (tmp_path / "hf_datasets").is_dir()  # the datasets cache stays inside the output directory


def test_avg_pass_at_1_over_samples(trained, tmp_path):
    model, tokenizer, _ = trained
    name = write_task_files(tmp_path, "sort", {"max_len": 3}, limit=8, samples=4, max_new_tokens=8)
    score = evaluate(model, tokenizer, [name], tmp_path, batch_size=8)[name]["score"]
    assert 0.0 <= score <= 1.0
    config = (tmp_path / f"{name}.yaml").read_text()
    assert "repeats: 4" in config and "take_first_k" in config
    # the generated scorer averages the reward over every sample of a document
    import importlib.util

    spec = importlib.util.spec_from_file_location("scorer", tmp_path / f"{name}_utils.py")
    scorer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scorer)
    doc = json.loads((tmp_path / f"{name}.jsonl").read_text().splitlines()[0])
    wrong = "9,9,9,9,9"
    assert scorer.process_results(doc, [[doc["answer"], wrong, doc["answer"], wrong]]) == {"reward": 0.5}


def test_suite_eval_section_writes_eval_parquet(trained, tmp_path):
    _, _, cache = trained
    data = tiny_suite(cache, objectives=[{"name": "gspo"}], budget={"kind": "steps", "value": 3},
                      eval={"tasks": ["sort"], "every": 2, "limit": 8, "greedy": True})
    run_suite(data, tmp_path / "out")
    run_dir = tmp_path / "out" / "tiny" / "gspo-s0"
    evals = pd.read_parquet(run_dir / "eval.parquet")
    assert evals["step"].tolist() == [0, 2, 3] and (evals["task"] == "gspo_sort").all()
    assert evals["score"].between(0, 1).all()
    assert evals["compute/cum_flops"].iloc[0] == 0 and evals["compute/cum_flops"].is_monotonic_increasing
    assert (run_dir / "checkpoint" / "model" / "config.json").is_file()  # HF format: lm-eval / vLLM open it
    # standalone: the same run's checkpoint, greedy, gives the final eval score again
    result = CliRunner().invoke(app, ["eval", str(run_dir), "--tasks", "sort", "--greedy", "--limit", "8",
                                      "--max-new-tokens", "8"])
    assert result.exit_code == 0, result.output
    scores = json.loads((run_dir / "eval" / "scores.json").read_text())
    assert scores["gspo_sort"]["score"] == pytest.approx(evals["score"].iloc[-1])


@pytest.mark.parametrize("caller", [None, "0"])
def test_lm_eval_runs_offline_and_quiet_for_the_call_only(monkeypatch, caller):
    """Offline unless the caller chose (HF_HUB_OFFLINE=0 fetches a standard task's data); lm-eval's log
    at ERROR; both as they were afterwards, also when the call raises."""
    import logging

    for name in OFFLINE:
        monkeypatch.delenv(name, raising=False)
    if caller is not None:
        monkeypatch.setenv("HF_HUB_OFFLINE", caller)
    logger = logging.getLogger("lm_eval")
    monkeypatch.setattr(logger, "level", logging.INFO)
    with pytest.raises(RuntimeError), lm_eval_scope():
        assert logger.level == logging.ERROR
        assert os.environ.get("HF_HUB_OFFLINE") == (caller or "1")
        assert os.environ.get("HF_DATASETS_OFFLINE") == (None if caller else "1")
        raise RuntimeError("lm-eval failed")
    assert logger.level == logging.INFO
    assert os.environ.get("HF_HUB_OFFLINE") == caller and "HF_DATASETS_OFFLINE" not in os.environ


def test_eval_cli_refuses_other_paths(tmp_path):
    result = CliRunner().invoke(app, ["eval", str(tmp_path), "--tasks", "sort"])
    assert result.exit_code == 2 and "neither a run directory" in result.output
