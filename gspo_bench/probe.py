"""One RL step of each objective on a tiny MoE, from identical weights and identical rollouts.

The smallest real job of the suite (`gspo-bench probe`): sample G responses for P prompts from a
randomly initialised tiny MoE, score them with a verifiable synthetic reward (the share of digit
characters in the response), compute group advantages and the old policy's log-probs once, then
for every objective take the paper's K minibatch updates from the same weights and report the
step's measurements averaged over all K minibatches: clip fraction, ratio variances, KL, and the
expert-activation drift of minibatches 2..K (routing of minibatch j's forward, after j-1 updates,
against the old policy's routing of the same tokens; all valid positions).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from gspo_bench.models import build_char_tokenizer, build_tiny_moe
from gspo_bench.models.forward import response_forward
from gspo_bench.models.tokenizer import EOS_ID, PAD_ID
from gspo_bench.moe import RoutingCapture, routing_drift
from gspo_bench.objectives import get_objective, group_advantages, objective_spec
from gspo_bench.rollout import Rollout, SamplingParams, make_engine


@dataclass(frozen=True)
class ProbeConfig:
    objectives: Sequence[str] = ("grpo", "gspo", "gspo_token", "dapo", "gmpo", "sapo", "cispo", "dr_grpo")
    family: str = "qwen3_moe"
    num_layers: int = 4
    prompts: int = 8  # P
    group_size: int = 8  # G
    prompt_len: int = 8
    max_new_tokens: int = 24
    minibatches: int = 4  # K, as the paper
    lr: float = 3e-4
    grad_clip: float = 1.0
    seed: int = 0


def digit_share_reward(texts: list[str]) -> torch.Tensor:
    """Share of digit characters in each response (a verifiable reward in [0, 1])."""
    return torch.tensor([sum(c.isdigit() for c in t) / max(len(t), 1) for t in texts])


def sample_rollouts(model, tokenizer, cfg: ProbeConfig) -> Rollout:
    """P random prompts x G responses sampled by the `hf` engine."""
    gen = torch.Generator().manual_seed(cfg.seed)
    prompts = torch.randint(4, len(tokenizer), (cfg.prompts, cfg.prompt_len), generator=gen).tolist()
    engine = make_engine("hf", pad_id=PAD_ID, eos_id=EOS_ID)
    params = SamplingParams(group_size=cfg.group_size, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed,
                            capture_routing=False)
    return engine.generate(model, prompts, params)


def run_probe(cfg: ProbeConfig, on_result: Callable[[dict], None] | None = None) -> list[dict]:
    """Run the probe; returns one dict of step measurements per objective."""
    tokenizer = build_char_tokenizer()
    base = build_tiny_moe(cfg.family, seed=cfg.seed, vocab_size=len(tokenizer), num_layers=cfg.num_layers)
    rollout = sample_rollouts(base, tokenizer, cfg)
    seqs, attention_mask, response_mask = rollout.input_ids, rollout.attention_mask, rollout.response_mask
    n_resp = response_mask.shape[1]
    rewards = digit_share_reward(tokenizer.batch_decode(rollout.response_ids, skip_special_tokens=True))
    advantages = group_advantages(rewards, cfg.group_size)  # [B]
    with torch.no_grad(), RoutingCapture(base) as old_capture:
        old_logp, _ = response_forward(base, seqs, attention_mask, n_resp)  # [B, T]
    old_routing = old_capture.routing  # [L, B, L_seq, k]

    order = torch.randperm(len(seqs), generator=torch.Generator().manual_seed(cfg.seed + 1))
    chunks = order.chunk(cfg.minibatches)
    results = []
    for name in cfg.objectives:
        spec = objective_spec(name)
        objective = get_objective(name)
        model = copy.deepcopy(base).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
        sums: dict[str, float] = {}
        drift_sums: dict[str, float] = {}
        start = time.perf_counter()
        for j, idx in enumerate(chunks):
            with RoutingCapture(model) as capture:
                logp, _ = response_forward(model, seqs[idx], attention_mask[idx], n_resp)
            if j > 0:  # minibatch 1 runs before any update: its drift is 0 by construction
                drift = routing_drift(old_routing[:, idx], capture.routing, attention_mask[idx])
                for key in ("moe/drift", "moe/drift_expert"):
                    drift_sums[key] = drift_sums.get(key, 0.0) + drift[key]
            clip = {} if spec.clip_low is None else {"clip_low": spec.clip_low, "clip_high": spec.clip_high}
            loss, metrics = objective(
                logp=logp, old_logp=old_logp[idx], advantages=advantages[idx], mask=response_mask[idx], **clip
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            for key, value in {"loss": loss.detach(), "grad/norm": grad_norm, **metrics}.items():
                sums[key] = sums.get(key, 0.0) + float(value)
        row = {"objective": name, **{k: v / len(chunks) for k, v in sums.items()}}
        row.update({k: v / max(len(chunks) - 1, 1) for k, v in drift_sums.items()})
        row["time/update_s"] = time.perf_counter() - start
        row["reward/mean"] = float(rewards.mean())
        results.append(row)
        if on_result is not None:
            on_result(row)
    return results
