"""gspo_bench.train.warmstart: the warm start's one SFT loop (`sft_loop`) under its two stopping rules,
the band (`BandStop`) and a fixed step count (`FixedSteps`)."""

from __future__ import annotations

import pytest
import torch

from gspo_bench.models import build_char_tokenizer, build_tiny_moe
from gspo_bench.tasks import make_task
from gspo_bench.train import warmstart
from gspo_bench.train.warmstart import WarmStartError, WarmStartParams, finetune, sampled_accuracy


def trained(params: WarmStartParams, monkeypatch) -> tuple[dict[str, torch.Tensor], list, list]:
    """A tiny MoE's weights after `finetune` under `params` (a band it cannot reach: it trains to
    max_steps), its (step, accuracy) evaluations and the seeds they sampled with."""
    tokenizer = build_char_tokenizer()
    model = build_tiny_moe(vocab_size=len(tokenizer), num_layers=2, hidden_size=32, expert_hidden=32, num_experts=4)
    seeds, evaluations = [], []
    monkeypatch.setattr(warmstart, "sampled_accuracy",
                        lambda *a, seed: seeds.append(seed) or sampled_accuracy(*a, seed=seed))
    try:
        finetune(model, tokenizer, make_task("sort", max_len=3), params, on_eval=lambda *e: evaluations.append(e))
    except WarmStartError:
        assert params.steps is None
    return model.state_dict(), evaluations, seeds


def test_the_band_and_fixed_steps_train_alike_up_to_where_they_stop(monkeypatch):
    """The band unreached in 4 steps and exactly 4 steps: the same updates on the same examples, the
    same evaluations with the same seeds, bit-identical weights. Needs real SFT steps (a tiny MoE, batch
    of 4): a second loop that drew its examples or stepped its optimizer otherwise fails here."""
    common = {"batch_size": 4, "eval_every": 2, "eval_examples": 2, "max_new_tokens": 2, "seed": 3}
    band_weights, band_evals, band_seeds = trained(WarmStartParams(max_steps=4, band=(2.0, 2.0), **common), monkeypatch)
    steps_weights, steps_evals, steps_seeds = trained(WarmStartParams(steps=4, max_steps=1, **common), monkeypatch)
    assert [step for step, _ in band_evals] == [0, 2, 4] and band_seeds == [3, 5, 7]
    assert band_evals == steps_evals and band_seeds == steps_seeds
    assert band_weights.keys() == steps_weights.keys()
    assert all(torch.equal(band_weights[k], steps_weights[k]) for k in band_weights)
    _, untrained, _ = trained(WarmStartParams(max_steps=0, band=(2.0, 2.0), **common), monkeypatch)
    assert len(untrained) == 1


def scripted(monkeypatch, accuracies: list[float]) -> list[int]:
    """sft_step adds 1 to every weight and the evaluations score `accuracies` in turn; returns the
    steps' log."""
    taken, scores = [], iter(accuracies)

    def step(model, *rest):
        taken.append(1)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)

    monkeypatch.setattr(warmstart, "sft_step", step)
    monkeypatch.setattr(warmstart, "sampled_accuracy", lambda *a, **k: next(scores))
    return taken


class NoTask:
    def test_examples(self, n):
        return []


@pytest.mark.parametrize(("accuracies", "kept", "steps", "weight"), [
    ([0.0, 0.3], 0.3, 2, 2.0),  # in the band at step 2
    ([0.0, 0.1, 0.9], 0.1, 4, 2.0),  # jumps over: step 2's weights (0.1 nearer the band than 0.9)
    ([0.0, 0.1, 0.62], 0.62, 4, 4.0),  # jumps over, nearer the band than step 2's 0.1: step 4's weights
])
def test_the_band_stops_at_its_first_evaluation_reaching_it_keeping_the_nearest_weights(monkeypatch, accuracies, kept,
                                                                                         steps, weight):
    taken = scripted(monkeypatch, accuracies)
    model = torch.nn.Linear(1, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    info = finetune(model, None, NoTask(), WarmStartParams(max_steps=10, eval_every=2, band=(0.2, 0.6)))
    assert (info["accuracy"], info["steps"], model.weight.item()) == (kept, steps, weight)
    assert len(taken) == steps and info["in_band"] == (0.2 <= kept <= 0.6)
