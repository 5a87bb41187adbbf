"""`gspo-bench import` of a real TRL run: a GRPOTrainer run made here (as experiments/perf/bench.py runs
TRL), its trainer_state.json and its TensorBoard event files imported, and the report written over it.
The run is the tiniest that clips: a 1-layer MoE of hidden size 32, 2 prompts x 4 completions of 4
tokens, 3 generations of 2 optimizer steps each (the second step of each generation is off-policy, so
TRL's clip ratios are not all zero). Its training takes about a second; importing TRL about ten, so the
run is made once for the file (module scope) and read by every test."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gspo_bench.imports.write import import_plan

GENERATIONS, UPDATES = 3, 2  # RL steps, optimizer steps per RL step


@pytest.fixture(scope="module")
def trl_run(tmp_path_factory) -> Path:
    """TRL's output folder (trainer_state.json, runs/<date>/events.out.tfevents.*) of a tiny GRPO run."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from gspo_bench.models import build_char_tokenizer, build_tiny_moe, save_model

    root = tmp_path_factory.mktemp("trl")
    tokenizer = build_char_tokenizer()
    model = build_tiny_moe("qwen3_moe", seed=0, vocab_size=len(tokenizer), num_layers=1, hidden_size=32,
                           expert_hidden=32, num_experts=4, top_k=2, num_heads=2, num_kv_heads=1)
    weights = save_model(model, tokenizer, root / "weights")

    def reward(completions, **_):  # the share of odd digits and vowels: varies within a group
        return [sum(ch in "13579aeiou" for ch in text) / max(len(text), 1) for text in completions]

    args = GRPOConfig(
        output_dir=str(root / "out"), per_device_train_batch_size=4, steps_per_generation=UPDATES,
        gradient_accumulation_steps=1, num_iterations=1, num_generations=4, max_completion_length=4,
        generation_kwargs={"min_new_tokens": 4}, temperature=1.0, top_p=1.0, top_k=0,
        importance_sampling_level="token", loss_type="grpo", epsilon=3e-4, epsilon_high=4e-4, beta=0.0,
        learning_rate=5e-2, lr_scheduler_type="constant", max_steps=GENERATIONS * UPDATES, logging_steps=1,
        shuffle_dataset=False, seed=0, use_cpu=True, report_to=["tensorboard"], save_strategy="no",
        disable_tqdm=True, dataloader_num_workers=0, gradient_checkpointing=False)
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(weights, local_files_only=True),
                          reward_funcs=reward, args=args, processing_class=AutoTokenizer.from_pretrained(weights),
                          train_dataset=Dataset.from_list([{"prompt": f"{i}+{i}="} for i in range(16)]))
    trainer.train()
    trainer.save_state()  # trainer_state.json, as every checkpoint holds it
    return root / "out"


def logged(run: Path) -> list[dict]:
    """TRL's own log: trainer_state.json's log_history, less the end-of-training summary."""
    return [e for e in json.loads((run / "trainer_state.json").read_text())["log_history"] if "loss" in e]


def imported(run: Path, where: Path, files: list[str]) -> pd.DataFrame:
    plan = {"name": "trl", "mapping": "trl", "compute": {"flops_per_token": 1.0e6},
            "runs": [{"arm": "grpo", "seed": 0, "files": [str(run / f) for f in files]}]}
    where.mkdir(parents=True, exist_ok=True)
    (where / "plan.yaml").write_text(yaml.safe_dump(plan))
    suite, _ = import_plan(where / "plan.yaml", where / "out")
    return pd.read_parquet(suite / "grpo-s0" / "metrics.parquet")


def test_trainer_state_import_equals_what_trl_logged(trl_run, tmp_path):
    log = logged(trl_run)
    metrics = imported(trl_run, tmp_path, ["trainer_state.json"])
    generations = [e for e in log if "reward" in e]  # TRL logs the reward once per generation
    assert len(log) == GENERATIONS * UPDATES and len(generations) == GENERATIONS
    assert metrics["step"].tolist() == [e["step"] for e in generations] == [1, 3, 5]
    assert metrics["reward/mean"].tolist() == [e["reward"] for e in generations]
    # a row is one RL step: its clip fraction is the mean of what TRL logged at each of its optimizer steps
    clip = [np.mean([e["clip_ratio/region_mean"] for e in log if s <= e["step"] < s + UPDATES])
            for s in (1, 3, 5)]
    assert metrics["clip/frac"].tolist() == clip and any(c > 0 for c in clip)
    assert metrics["compute/cum_tokens"].tolist() == [e["num_tokens"] for e in generations]


def test_event_files_import_as_the_trainer_state(trl_run, tmp_path):
    from_state = imported(trl_run, tmp_path / "a", ["trainer_state.json"])
    from_events = imported(trl_run, tmp_path / "b", ["runs"])  # transformers' TensorBoard folder
    assert from_events["step"].tolist() == from_state["step"].tolist()
    for column in ("reward/mean", "clip/frac", "loss", "grad/norm", "entropy/mean", "compute/cum_flops"):
        np.testing.assert_allclose(from_events[column], from_state[column], rtol=1e-6, err_msg=column)  # float32
    assert from_state["moe/drift"].isna().all() and from_state["ratio/token_var"].isna().all()  # TRL logs none
    prov = json.loads((tmp_path / "a" / "out" / "trl" / "grpo-s0" / "provenance.json").read_text())["imported"]
    assert {"moe/drift", "kl/ref"} <= set(prov["not_measured"])  # kl: mapped, never logged (beta = 0)
    assert "reward/mean" not in prov["not_measured"] and prov["unknown_keys"] == []


def test_the_report_reads_an_imported_trl_run(trl_run, tmp_path):
    from analysis.data.load import load_results
    from analysis.report.writer import write_report

    imported(trl_run, tmp_path, ["trainer_state.json"])
    results = load_results(tmp_path / "out" / "trl")
    assert results.runs["device"].tolist() == ["imported from trl"] and results.runs["steps"].tolist() == [3]
    text = write_report(results, tmp_path / "report")["md"].read_text()
    assert "Suite(s) **trl**: 1 objectives x 1 seed(s)" in text
    assert (tmp_path / "report" / "figures" / "fig2_clip_fraction.png").is_file()
    assert not math.isnan(results.metrics["clip/frac"].iloc[0])
    # its signals scored with the package's early-warning rules: the run is listed, not judged, with the rules'
    # signals TRL logs (grad/norm, response/len_mean; entropy is below no shipped rule) and every alarm they fired
    warnings = text.split("## Each failed (or imported) run")[1].split("<a id=")[0]
    from analysis.evidence.early_warnings import load_rules

    carried = {r.rule.signal for r in load_rules() if results.metrics.get(r.rule.signal, pd.Series()).notna().any()}
    assert carried == {"grad/norm", "response/len_mean"}
    row = [line for line in warnings.splitlines() if "not judged" in line]
    assert len(row) == 1 and [cell.strip() for cell in row[0].split("|")[1:7]] == ["trl", "grpo", "0", "not judged",
                                                                                  "-", "2"]


def test_a_trl_log_without_its_reward_names_the_missing_key(trl_run, tmp_path):
    """TRL's rows are the steps that logged `reward`: a log without it (every other key there) is refused
    naming that key and the keys that were logged, not as a log of none of the mapping's keys."""
    from gspo_bench.imports.write import ImportError_

    state = json.loads((trl_run / "trainer_state.json").read_text())
    state["log_history"] = [{k: v for k, v in entry.items() if k != "reward"} for entry in state["log_history"]]
    (tmp_path / "trainer_state.json").write_text(json.dumps(state))
    with pytest.raises(ImportError_) as caught:
        imported(tmp_path, tmp_path / "import", ["trainer_state.json"])
    message = str(caught.value)
    assert message.startswith("run 'grpo' seed 0: reward was never logged, though clip_ratio/high_mean, "), message
    assert "grad_norm, " in message and "loss, " in message and "reward_std" in message and "\n" not in message
    assert "a row is a step that logs it (the mapping's `rows: reward/mean`)" in message
    assert "none of the mapping's keys" not in message and not (tmp_path / "import" / "out" / "trl").exists()
