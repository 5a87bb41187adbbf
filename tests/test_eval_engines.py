"""Held-out evaluation that favours no arm: lm-eval's path never sees the engine's router noise, and the
rollout-engine path (`eval.engine: rollout`) samples with the run's engine, its router and logit noise off,
deterministically per seed, scoring as lm-eval's does."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gspo_bench.config import EvalConfig, parse_suite
from gspo_bench.config.load import SuiteError
from gspo_bench.models.tokenizer import EOS_ID, PAD_ID
from gspo_bench.rollout import SamplingParams, left_pad, make_engine
from gspo_bench.rollout.router_noise import RouterNoise
from gspo_bench.suite.runner import starting_weights
from gspo_bench.tasks import make_task
from gspo_bench.train.evaluation import EngineEvaluator, Evaluator, without_engine_noise
from tests.helpers.runs import tiny_suite

TASK = {"name": "sort", "params": {"max_len": 3}}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The tiny suite's warm-started MoE (sorting): its rewards are neither all 0 nor all 1."""
    path = starting_weights(parse_suite(tiny_suite(tmp_path_factory.mktemp("ws"))), 0, log=lambda m: None)
    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def greedy_texts(model, tokenizer, examples, noise: float = 0.0) -> list[str]:
    ids, mask = left_pad([tokenizer.encode(ex.prompt) for ex in examples], tokenizer.pad_token_id)
    noisy = RouterNoise(model, noise, 0, torch.arange(len(examples)), ids.shape[1]) if noise else None
    with torch.no_grad(), noisy if noisy is not None else torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=8,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    return tokenizer.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True)


def test_lm_evals_path_scores_the_clean_model_however_noisy_the_engine(trained, tmp_path):
    """The evaluator the loop builds for `eval.engine: lm_eval` samples with the training model itself:
    its greedy score is the clean model's, not what the same model scores under router noise."""
    model, tokenizer = trained
    task = make_task("sort", max_len=3)
    examples = task.test_examples(24)
    cfg = EvalConfig(tasks=["sort"], limit=24, greedy=True, max_new_tokens=8, batch_size=8)
    scores = Evaluator(cfg, tmp_path, "sort", {"max_len": 3})(model, tokenizer)["gspo_sort"]

    def score(texts):
        return sum(task.reward(t, ex) for t, ex in zip(texts, examples, strict=True)) / len(examples)

    clean, noisy = score(greedy_texts(model, tokenizer, examples)), score(greedy_texts(model, tokenizer, examples, 2.0))
    assert scores["score"] == pytest.approx(clean) and scores["engine"] == "lm_eval"
    assert clean != pytest.approx(noisy)  # the noise would show: the comparison can fail


def engine_evaluator(noise: float = 0.0, logit_noise: float = 0.0, **cfg) -> EngineEvaluator:
    engine = make_engine("hf", pad_id=PAD_ID, eos_id=EOS_ID, router_noise=noise, logit_noise=logit_noise)
    settings = {"tasks": ["sort"], "limit": 12, "samples": 3, "max_new_tokens": 8, "engine": "rollout"} | cfg
    return EngineEvaluator(EvalConfig(**settings), engine, "sort", {"max_len": 3})


def test_the_rollout_engine_path_samples_with_the_router_noise_off(trained):
    model, tokenizer = trained
    evaluator = engine_evaluator(noise=2.0)
    assert evaluator.engine.router_noise == 0.0 and evaluator.engine.weights is not None
    examples = evaluator.tasks[0][2]
    texts = evaluator.sample(model, tokenizer, examples, seed=11)
    prompts = [tokenizer.encode(ex.prompt) for ex in examples]
    params = SamplingParams(group_size=3, max_new_tokens=8, seed=11, capture_routing=False)
    for sigma, same in ((0.0, True), (2.0, False)):
        rollout = make_engine("hf", pad_id=PAD_ID, eos_id=EOS_ID, router_noise=sigma).generate(model, prompts, params)
        assert (tokenizer.batch_decode(rollout.response_ids, skip_special_tokens=True) == texts) == same
    noisy = make_engine("hf", pad_id=PAD_ID, eos_id=EOS_ID, router_noise=2.0)
    assert without_engine_noise(noisy) is not noisy and noisy.router_noise == 2.0  # the run's engine keeps its noise
    clean = make_engine("hf", pad_id=PAD_ID, eos_id=EOS_ID)
    assert without_engine_noise(clean) is clean
    for options in ({"logit_noise": 0.5}, {"router_noise": 1.0, "logit_noise": 0.5}):
        noisy = make_engine("hf", pad_id=PAD_ID, eos_id=EOS_ID, **options)
        quiet = without_engine_noise(noisy)
        assert (quiet.router_noise, quiet.logit_noise) == (0.0, 0.0) and noisy.logit_noise == 0.5
    assert engine_evaluator(logit_noise=0.5).engine.logit_noise == 0.0


def test_the_rollout_engine_score_is_the_average_pass_at_1_and_repeats_per_seed(trained):
    model, tokenizer = trained
    evaluator = engine_evaluator()
    examples = evaluator.tasks[0][2]
    task = make_task("sort", max_len=3)
    result = evaluator(model, tokenizer, seed=5)["gspo_sort"]
    texts = evaluator.sample(model, tokenizer, examples, seed=5)
    per_prompt = [sum(task.reward(texts[3 * i + j], ex) for j in range(3)) / 3 for i, ex in enumerate(examples)]
    mean = sum(per_prompt) / len(per_prompt)
    assert 0 < mean < 1 and result["score"] == pytest.approx(mean)
    spread = math.sqrt(sum((p - mean) ** 2 for p in per_prompt) / (len(per_prompt) - 1))
    assert result["stderr"] == pytest.approx(spread / math.sqrt(len(per_prompt)))
    assert result["metric"] == "reward" and result["engine"] == "rollout:hf"
    assert evaluator(model, tokenizer, seed=5) == {"gspo_sort": result}  # the same (seed, step): the same scores
    assert texts != evaluator.sample(model, tokenizer, examples, seed=6)


def test_the_rollout_engine_path_takes_our_tasks_and_samples_only():
    with pytest.raises(ValueError, match="greedy and lm_eval_tasks need engine lm_eval"):
        EvalConfig(tasks=["sort"], engine="rollout", greedy=True)
    with pytest.raises(ValueError, match="greedy and lm_eval_tasks need engine lm_eval"):
        EvalConfig(tasks=["sort"], engine="rollout", lm_eval_tasks=["gsm8k"])
    assert EvalConfig(tasks=["sort"], lm_eval_tasks=["gsm8k"]).engine == "lm_eval"
    with pytest.raises(SuiteError, match=r"eval\.tasks \['gsm8k'\]: eval\.engine rollout evaluates"):
        parse_suite({"name": "e", "task": TASK, "budget": {"kind": "steps", "value": 1},
                     "objectives": [{"name": "grpo"}], "eval": {"tasks": ["sort", "gsm8k"], "engine": "rollout"}})
