"""The `hf` rollout engine: batched `model.generate` sampling, CPU or GPU. Every row's tokens are a
function of (seed, the row's key) alone (`gspo_bench.rollout.sampling`), whatever batch it is in.

Sampling log-probs come from a logits processor placed after temperature and top-p, so they are
the log-probs of the distribution each token was actually drawn from; it keeps one [B, V] tensor,
not one per step.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from transformers import LogitsProcessor, LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

from gspo_bench.models.padding import left_pad
from gspo_bench.moe import RoutingCapture
from gspo_bench.rollout.batching import mask_after_eos
from gspo_bench.rollout.engine import Rollout, SamplingParams, register_engine
from gspo_bench.rollout.sampling import GumbelNoise


class _RecordSamplingLogprobs(LogitsProcessor):
    """Last in the chain: remembers log softmax of the final scores, gathers at the next sampled token.

    A row of NaN or +inf scores (a diverged policy) is sampled uniformly instead, and `finite`
    (a 0-d bool tensor, never copied to the host here) turns False: the training loop reads it with
    the rest of its step and marks the run collapsed.
    """

    def __init__(self):
        self.pending: torch.Tensor | None = None  # [B, V]
        self.gathered: list[torch.Tensor] = []  # per step [B]
        self.finite: torch.Tensor | None = None  # 0-d bool

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        bad = (torch.isnan(scores) | torch.isposinf(scores)).any(-1, keepdim=True)  # [B, 1]
        scores = torch.where(bad, 0.0, scores)
        finite = ~bad.any()
        self.finite = finite if self.finite is None else self.finite & finite
        if self.pending is not None:
            self.collect(input_ids[:, -1])
        self.pending = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def collect(self, tokens: torch.Tensor) -> None:
        self.gathered.append(self.pending.gather(-1, tokens[:, None]).squeeze(-1))
        self.pending = None


class HFEngine:
    name = "hf"
    returns_routing = True  # with SamplingParams.capture_routing

    def __init__(self, pad_id: int, eos_id: int):
        self.pad_id = pad_id
        self.eos_id = eos_id

    def sync_weights(self, model) -> None:  # samples from the training model itself
        return None

    @torch.no_grad()
    def generate(self, model, prompts: list[list[int]], params: SamplingParams) -> Rollout:
        if params.temperature <= 0 or not 0 < params.top_p <= 1:
            raise ValueError("hf engine: temperature must be > 0 and top_p in (0, 1]")
        device = next(model.parameters()).device
        rows = [p for p in prompts for _ in range(params.group_size)]  # groups of G consecutive rows
        prompt_ids, prompt_mask = left_pad(rows, self.pad_id)
        prompt_ids, prompt_mask = prompt_ids.to(device), prompt_mask.to(device)
        recorder = _RecordSamplingLogprobs()
        processors = LogitsProcessorList()
        if params.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(params.temperature))
        if params.top_p < 1.0:
            processors.append(TopPLogitsWarper(params.top_p))
        keys = torch.tensor(params.row_keys if params.row_keys is not None else range(len(rows)))
        if len(keys) != len(rows):
            raise ValueError(f"hf engine: {len(keys)} row keys for {len(rows)} rows")
        processors.append(recorder)  # the sampling distribution, before the noise that samples from it
        processors.append(GumbelNoise(params.seed, keys, prompt_ids.shape[1]))
        was_training = model.training
        model.eval()
        try:
            capture = RoutingCapture(model) if params.capture_routing else None
            with capture if capture is not None else nullcontext():
                seqs = model.generate(  # greedy over scores + Gumbel noise: a sample from softmax(scores)
                    input_ids=prompt_ids, attention_mask=prompt_mask, do_sample=False, logits_processor=processors,
                    max_new_tokens=params.max_new_tokens, pad_token_id=self.pad_id,
                    min_new_tokens=params.max_new_tokens if params.ignore_eos else 0,
                    synced_gpus=params.synced, eos_token_id=self.eos_id,
                    temperature=None, top_k=None, top_p=None,
                )
        finally:
            model.train(was_training)
        width = prompt_ids.shape[1]
        response = seqs[:, width:]  # [B, T]
        recorder.collect(response[:, -1])
        response_mask = mask_after_eos(response, self.eos_id)  # [B, T]
        sampling_logp = torch.stack(recorder.gathered, dim=1)  # [B, T]
        sampling_logp = torch.where(response_mask, sampling_logp, torch.zeros_like(sampling_logp))
        attention_mask = torch.cat([prompt_mask, response_mask.long()], dim=1)
        response = torch.where(response_mask, response, torch.full_like(response, self.pad_id))
        return Rollout(
            input_ids=torch.cat([prompt_ids, response], dim=1),
            attention_mask=attention_mask,
            response_mask=response_mask,
            sampling_logp=sampling_logp,
            # [L, B, L - 1, k]: under synced_gpus a rank that has finished keeps stepping (its
            # forwards are collective) and those dummy positions are routed too: cut them off
            routing=capture.routing[:, :, : seqs.shape[1] - 1] if capture is not None else None,
            finite=recorder.finite,
        )


@register_engine("hf")
def make_hf_engine(pad_id: int, eos_id: int, **_: object) -> HFEngine:
    return HFEngine(pad_id=pad_id, eos_id=eos_id)
