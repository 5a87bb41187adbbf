"""The 2026 objectives equal their reference implementations: each reference's computation transcribed
here as a small function (read from its repository at the commit named, not installed), run in float64
on shared batches with padding, extreme ratios and both advantage signs, and our registered objective
held to its loss, its gradient and the measurements it logs."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from gspo_bench.objectives import get_objective

# the loss and gradient of ours run in fp32 (gspo_bench.objectives.inputs); the references in float64
TOLERANCE = {"rtol": 1e-5, "atol": 1e-7}


def fp32_exact(values) -> torch.Tensor:
    """float64 values that float32 holds exactly: both sides start from the same numbers."""
    return torch.tensor(values, dtype=torch.float32).double()


def shared_batch(empty_row: bool = True) -> dict[str, torch.Tensor]:
    """B = 6 (5 with `empty_row` False), T = 5. Rows of lengths 5, 3, 1, 4, 2 and an all-padding row;
    log-ratios from 1e-3 to 25 in size (a token past the +-20 clamp, responses whose summed log-ratio
    is 9.2 and -19.1, past the sequence clamp's floor log 1e-8), advantages of both signs. Padding holds 123."""
    old = fp32_exact([[-1.0, -2.5, -0.3, -4.0, -0.7],
                      [-0.2, -3.0, -1.1, 0.0, 0.0],
                      [-12.0, 0.0, 0.0, 0.0, 0.0],
                      [-0.05, -0.9, -30.0, -2.2, 0.0],
                      [-1.5, -0.4, 0.0, 0.0, 0.0],
                      [0.0, 0.0, 0.0, 0.0, 0.0]])
    log_ratio = fp32_exact([[0.1, -0.05, 0.02, 0.3, -0.2],
                            [0.15, -1.6, 0.001, 0.0, 0.0],
                            [math.log(1e4), 0.0, 0.0, 0.0, 0.0],
                            [-0.04, 0.5, 25.0, -21.0, 0.0],
                            [-9.5, -9.6, 0.0, 0.0, 0.0],
                            [0.0, 0.0, 0.0, 0.0, 0.0]])
    lengths = torch.tensor([5, 3, 1, 4, 2, 0])
    mask = torch.arange(5)[None, :] < lengths[:, None]
    logp = torch.where(mask, old + log_ratio, 123.0)
    advantages = fp32_exact([1.2, -0.8, 0.6, -1.5, 0.7, 0.0])
    # the engine's mu: near pi_old, a few tokens far from it (probability shifts past 0.1 either way)
    mu = old + fp32_exact([[0.02, -0.01, 0.25, 0.0, -0.6],
                           [-1.0, 0.03, -0.02, 0.0, 0.0],
                           [0.05, 0.0, 0.0, 0.0, 0.0],
                           [-0.3, 0.0, 10.0, -2.0, 0.0],
                           [0.0, 0.1, 0.0, 0.0, 0.0],
                           [0.0, 0.0, 0.0, 0.0, 0.0]])
    mu = torch.where(mask, mu, 123.0)
    rows = slice(None) if empty_row else slice(0, 5)
    return {"logp": logp[rows], "old_logp": torch.where(mask, old, 123.0)[rows], "advantages": advantages[rows],
            "mask": mask[rows], "sampling_logp": mu[rows]}


def ours(name: str, batch: dict[str, torch.Tensor], **params) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(loss, d loss / d logp, metrics as floats) of our registered objective `name`."""
    inputs = {k: v for k, v in batch.items() if k != "sampling_logp" or name == "ipo"}
    logp = inputs.pop("logp").clone().requires_grad_(True)
    loss, metrics = get_objective(name)(logp=logp, **inputs, **params)
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.double(), grad, {k: float(v) for k, v in metrics.items()}


def theirs(reference, batch: dict[str, torch.Tensor], **params) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(loss, d loss / d logp, metrics as floats) of a transcribed reference."""
    logp = batch["logp"].clone().requires_grad_(True)
    loss, metrics = reference(logp, batch, **params)
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.detach(), grad, {k: float(v) for k, v in metrics.items()}


# ---------------------------------------------------------------------------------------- VESPO

def trl_vespo(per_token_logps, batch, k_pos=2.0, lambda_pos=3.0, k_neg=3.0, lambda_neg=2.0):
    """TRL's VESPO loss, transcribed from huggingface/trl at f2cd57710ae345ea6428ae95363267fcf38a3dc8,
    trl/trainer/grpo_trainer.py: `GRPOTrainer.get_gamma_weights` (importance_sampling_ratio None: no vLLM
    correction) and the `vespo` branches of `_compute_loss` (one process: the normaliser
    `num_items_in_batch` is the batch's count of completion tokens) and its `vespo/phi_seq_mean` metric."""
    mask = batch["mask"].double()
    advantages = batch["advantages"].unsqueeze(1)
    log_ratio = per_token_logps - batch["old_logp"]
    with torch.no_grad():
        lower_clamp = math.log(1e-8)
        log_ratio_clamped = torch.clamp(log_ratio, -20.0, 20.0)
        seq_log_ratio = torch.sum(log_ratio_clamped * mask, dim=-1, keepdim=True)
        log_w_seq = torch.clamp(seq_log_ratio, lower_clamp, 20.0)
        w_seq = torch.exp(log_w_seq)
        is_nonneg_adv = advantages >= 0
        k_seq = torch.where(is_nonneg_adv, k_pos, k_neg)
        lambda_seq = torch.where(is_nonneg_adv, lambda_pos, lambda_neg).clamp(min=1e-4)
        log_phi = lambda_seq + k_seq * log_w_seq - lambda_seq * w_seq
        phi_seq = torch.exp(log_phi).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    per_token_loss = -phi_seq * advantages * per_token_logps
    loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
    return loss, {"vespo/phi_seq_mean": phi_seq.sum() / phi_seq.shape[0]}


def test_vespo_equals_trl_in_loss_gradient_and_phi():
    batch = shared_batch()
    loss, grad, metrics = ours("vespo", batch)
    ref_loss, ref_grad, _ = theirs(trl_vespo, batch)
    assert_close(loss, ref_loss, **TOLERANCE)
    assert_close(grad, ref_grad, **TOLERANCE)
    # phi passes gradient where W is near 1 (rows 0, 1, 3) and none at W = 1e4 (row 2)
    assert bool((ref_grad[[0, 1, 3]].abs() > 1e-3).any(-1).all()) and bool((ref_grad[2] == 0).all())
    # TRL's phi mean counts an all-padding row (phi 1 there); ours counts the responses with tokens
    _, _, metrics = ours("vespo", shared_batch(empty_row=False))
    _, _, ref_metrics = theirs(trl_vespo, shared_batch(empty_row=False))
    assert metrics["vespo/phi_mean"] == pytest.approx(ref_metrics["vespo/phi_seq_mean"], rel=1e-5)


def test_vespo_equals_trl_at_other_shapes():
    batch = shared_batch()
    params = {"k_pos": 0.5, "lambda_pos": 1.5, "k_neg": 4.0, "lambda_neg": 0.25}
    loss, grad, _ = ours("vespo", batch, **params)
    ref_loss, ref_grad, _ = theirs(trl_vespo, batch, **params)
    assert_close(loss, ref_loss, **TOLERANCE)
    assert_close(grad, ref_grad, **TOLERANCE)



# ---------------------------------------------------------------------------------------- DRO

def verl_dro(log_prob, batch, beta=0.05):
    """verl's DRO policy loss, transcribed from verl-project/verl at 1dda039b9c6311889a9c9a26040677e1254814f9,
    verl/trainer/ppo/core_algos.py: `compute_policy_loss_dro` (no rollout correction weights) reduced by
    `agg_loss` in its default mode token-mean on one rank (verl_F.masked_sum over the valid-token count),
    and its metric `actor/ppo_kl` (verl_F.masked_mean, denominator + 1e-8)."""
    response_mask = batch["mask"].double()
    advantages = batch["advantages"].unsqueeze(1).expand_as(log_prob)
    log_ratio = log_prob - batch["old_logp"]
    pg_losses = -(log_prob * advantages - 0.5 * beta * log_ratio.square())
    masked_sum = (torch.where(response_mask.bool(), pg_losses, 0.0) * response_mask).sum()
    pg_loss = masked_sum / response_mask.sum()
    ppo_kl = (torch.where(response_mask.bool(), -log_ratio, 0.0) * response_mask).sum() / (response_mask.sum() + 1e-8)
    return pg_loss, {"actor/ppo_kl": ppo_kl.detach()}


@pytest.mark.parametrize("beta", [0.05, 1.5])
def test_dro_equals_verl_in_loss_gradient_and_ppo_kl(beta):
    batch = shared_batch()
    loss, grad, metrics = ours("dro", batch, beta=beta)
    ref_loss, ref_grad, ref_metrics = theirs(verl_dro, batch, beta=beta)
    assert_close(loss, ref_loss, **TOLERANCE)
    assert_close(grad, ref_grad, **TOLERANCE)
    assert metrics["dro/ppo_kl"] == pytest.approx(ref_metrics["actor/ppo_kl"], rel=1e-5)


# ---------------------------------------------------------------------------------------- IPO (prime-rl)

def prime_ipo_sample(trainer_logprobs, inference_logprobs, advantages, loss_mask, ipo_threshold=0.1, adv_tau=1.0,
                     kl_tau=1e-3):
    """prime-rl's `ipo_loss_fn` on one sample (1-D tensors, no loss weights), transcribed from
    PrimeIntellect-ai/prime-rl at 559b44772e471d1538537b8805cc77f3824a5e64, src/prime_rl/trainer/rl/loss.py
    (with `compute_importance_ratio_and_mismatch_kl` and `_safe_mean`; defaults of its IPOLossConfig,
    packages/prime-rl-configs/src/prime_rl/configs/trainer.py)."""
    def safe_mean(values, mask):
        return values[mask].sum() / torch.clamp_min(mask.sum(), 1)

    log_importance_ratio = trainer_logprobs - inference_logprobs
    importance_ratio = torch.exp(log_importance_ratio)
    mismatch_kl = importance_ratio - log_importance_ratio - 1
    abs_probs_diff = torch.abs(torch.exp(trainer_logprobs) - torch.exp(inference_logprobs))
    is_masked = abs_probs_diff > ipo_threshold
    keep_mask = loss_mask & ~is_masked
    advantages = adv_tau * advantages
    pg_loss = keep_mask * advantages * importance_ratio
    kl_loss = loss_mask * log_importance_ratio**2
    per_token_loss = -pg_loss + kl_tau * kl_loss
    loss = per_token_loss.sum()
    metrics = {"masked_mismatch_kl": safe_mean(mismatch_kl, loss_mask & is_masked),
               "unmasked_mismatch_kl": safe_mean(mismatch_kl, keep_mask),
               "is_masked": safe_mean(is_masked, loss_mask)}
    return loss, {k: v.detach() for k, v in metrics.items()}


def prime_ipo(trainer_logprobs, batch, **config):
    """prime-rl's `compute_loss` over the rows as samples (the rl component alone): the samples' summed
    losses over `rl_scale`, the global count of loss tokens (`train.py`, one rank); metrics of the first sample."""
    mask = batch["mask"]
    rl_scale = max(int(mask.sum()), 1)
    losses, metrics = zip(*(prime_ipo_sample(trainer_logprobs[i], batch["sampling_logp"][i],
                                             batch["advantages"][i].expand(mask.shape[1]), mask[i], **config)
                            for i in range(mask.shape[0])))
    return sum(losses) / rl_scale, metrics[0]


PRIME_SETTINGS = [({}, {}),
                  ({"threshold": 0.3, "adv_tau": 2.0, "kl_tau": 0.1}, {"ipo_threshold": 0.3, "adv_tau": 2.0, "kl_tau": 0.1})]


@pytest.mark.parametrize(("params", "config"), PRIME_SETTINGS)
def test_ipo_equals_prime_rl_in_loss_gradient_and_per_sample_metrics(params, config):
    batch = shared_batch()
    loss, grad, _ = ours("ipo", batch, **params)
    ref_loss, ref_grad, _ = theirs(prime_ipo, batch, **config)
    assert_close(loss, ref_loss, **TOLERANCE)
    assert_close(grad, ref_grad, **TOLERANCE)
    masked = []
    for i in range(batch["mask"].shape[0]):  # prime-rl logs one value per sample: ours on that row alone
        row = {k: v[i : i + 1] for k, v in batch.items()}
        _, _, metrics = ours("ipo", row, **params)
        _, _, ref_metrics = theirs(prime_ipo, row, **config)
        assert metrics["ipo/masked_frac"] == pytest.approx(ref_metrics["is_masked"], rel=1e-6)
        assert metrics["ipo/masked_mismatch_kl"] == pytest.approx(ref_metrics["masked_mismatch_kl"], rel=1e-5)
        assert metrics["ipo/unmasked_mismatch_kl"] == pytest.approx(ref_metrics["unmasked_mismatch_kl"], rel=1e-5)
        masked.append(ref_metrics["is_masked"])
    if not params:  # at the default threshold the batch has kept and masked tokens (pi above and below mu)
        assert 0 < sum(masked) < 5
