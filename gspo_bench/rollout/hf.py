"""The `hf` rollout engine: batched sampling from the policy, CPU or GPU. Every row's tokens are a
function of (seed, the row's key) alone (`gspo_bench.rollout.sampling`), whatever batch it is in.

    rollout: {dtype: bfloat16, engine_options: {decode: static}}

Weights: in fp32 the engine samples from the training model itself. In bf16 on a GPU it holds a
bf16 copy of the policy for the whole run (`RolloutWeights`), refreshed in place (`copy_`, no
allocation) by `sync_weights` before every rollout, i.e. after every optimizer step, and generates on
it with autocast off: the fp32 master weights and AdamW state are untouched, and the copy is what
the training-inference mismatch measurements compare against. Not under FSDP2 (the sharded model
samples under autocast) and not on CPU by default (`copy_weights`), where bf16 expert matmuls are
~30x slower than fp32 ones and autocast over the fp32 weights is faster.

Decoding (`decode`): `generate` is transformers' `model.generate`; `static` is our static-cache loop
(`rollout.static_decode`), a CUDA graph per decode step on a GPU (`graph`, on by default there),
sampling by the same rule, routing included: the same tokens, 7-18x faster on an H100
(`results/perf/gpu/`). Default: `static` on a GPU, `generate` on CPU and under torchrun.

Rows in chunks (`rollout.kv_cache_gib`, default off): the rows are generated in chunks whose KV
cache at full length fits the budget (`rollout.chunks`), on both decode paths; a row's tokens,
log-probs and routes are those of one batch.

Router noise (`router_noise: sigma`, default 0: off) perturbs the engine's expert selection, and
only the engine's, to top-k(router logits + sigma * z) with counter-based Gaussian z
(`rollout.router_noise`): a controlled routing mismatch that `moe/rollout_gap` measures and R3
removes. Both decode paths apply it and record the perturbed routing.

Logit noise (`logit_noise: std`, default 0: off) adds std * z to the engine's final logits before
temperature and top-p, z counter-based Gaussian of (seed, row key, t, vocab id)
(`rollout.logit_noise`): the engine samples from, and reports the log-probs of, the noisy
distribution, while the trainer recomputes clean ones: a controlled precision mismatch that
`mismatch/k3_kl` measures. Both decode paths add it at the same point, so they sample alike.

Sampling log-probs come from a logits processor placed after temperature and top-p, so they are
the log-probs of the distribution each token was actually drawn from; it keeps one [B, V] tensor,
not one per step.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext
from dataclasses import fields, replace
from typing import Any

import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from gspo_bench.models.families import hf_model
from gspo_bench.models.padding import left_pad
from gspo_bench.moe import RoutingCapture
from gspo_bench.rollout.batching import kept_ids, mask_after_eos
from gspo_bench.rollout.chunks import join_rollouts, kv_bytes_per_token, rows_per_chunk
from gspo_bench.rollout.engine import Rollout, SamplingParams, check_prompt_lengths, register_engine
from gspo_bench.rollout.logit_noise import LogitNoise
from gspo_bench.rollout.router_noise import RouterNoise, check_sigma
from gspo_bench.rollout.sampling import GumbelNoise
from gspo_bench.rollout.static_decode import DecodeRule, static_decode, static_kept_sets

DECODES = ("generate", "static")


def wants_copy(dtype: torch.dtype, device_type: str, sharded: bool, copy_weights: bool | None) -> bool:
    """A rollout copy where the rollout `dtype` is below fp32, the model is whole on this process (not
    `sharded`) and `copy_weights` says so (None: on a GPU, "cuda")."""
    if dtype == torch.float32 or sharded:
        return False
    return copy_weights if copy_weights is not None else device_type == "cuda"


def is_sharded(model: torch.nn.Module) -> bool:
    """Its parameters are DTensors (FSDP2): the model is not whole on this process."""
    return any(hasattr(p, "to_local") for p in model.parameters())


class RolloutWeights:
    """The policy's weights in the rollout dtype, one copy for the whole run, refreshed in place."""

    def __init__(self, dtype: torch.dtype):
        self.dtype = dtype
        self.model: torch.nn.Module | None = None
        self._targets: list[torch.Tensor] = []

    @staticmethod
    def applies(model: torch.nn.Module, dtype: torch.dtype, copy_weights: bool | None) -> bool:
        """`wants_copy` for `model`: sharded when its parameters are DTensors, on its first parameter's device."""
        return wants_copy(dtype, next(model.parameters()).device.type, is_sharded(model), copy_weights)

    @torch.no_grad()
    def refresh(self, model: torch.nn.Module) -> torch.nn.Module:
        """The copy, equal to `model`'s parameters cast to the rollout dtype (buffers, such as rotary
        frequencies, keep their dtype). Made on first use; later calls copy in place."""
        sources = list(model.parameters())
        if self.model is None:
            self.model = copy.deepcopy(model).eval().requires_grad_(False)
            for param in self.model.parameters():
                param.data = param.data.to(self.dtype)
            self._targets = list(self.model.parameters())
        if len(sources) != len(self._targets):
            raise RuntimeError("the policy's parameters changed since its rollout copy was made")
        torch._foreach_copy_(self._targets, [p.detach() for p in sources])
        return self.model


def decodes_in_inference_mode(sampler: torch.nn.Module, device: torch.device, params: SamplingParams) -> bool:
    """Whether the engine decodes under `torch.inference_mode` rather than `no_grad` alone: on CPU, for
    a model whole on this process and outside torchrun. It runs the same kernels (the same tokens,
    log-probs and routes, bit for bit) without autograd's view and version bookkeeping per op, which
    on a small model's dispatch-bound decode is ~11% of the rollout (experiments/perf/kernel_bound.py,
    paired). Not on a GPU (CUDA graphs capture the static decoder's tensors) nor under FSDP2, whose
    gathered parameters would be made inference tensors."""
    return device.type == "cpu" and not is_sharded(sampler) and not params.synced


def outside_inference_mode(rollout: Rollout) -> Rollout:
    """`rollout` with every tensor copied to a normal one: the training forward and its backward use the
    tokens and the routes (R3's replay), which autograd cannot save as inference tensors."""
    return replace(rollout, **{field.name: value.clone() for field in fields(rollout)
                               if isinstance(value := getattr(rollout, field.name), torch.Tensor)})


class _RecordSamplingLogprobs(LogitsProcessor):
    """Last in the chain: remembers log softmax of the final scores, gathers at the next sampled token.

    A row of NaN or +inf scores (a diverged policy) is sampled uniformly instead, and `finite`
    (a 0-d bool tensor, never copied to the host here) turns False: the training loop reads it with
    the rest of its step and marks the run collapsed.
    """

    def __init__(self, record_kept: bool = False) -> None:
        self.pending: torch.Tensor | None = None  # [B, V]
        self.gathered: list[torch.Tensor] = []  # per step [B]
        self.finite: torch.Tensor | None = None  # 0-d bool
        self.record_kept = record_kept  # each step's kept set (the tokens top-k / top-p left a finite score)
        self.kept: list[torch.Tensor] = []  # per step [B, K_t] ids, -1 past a row's set

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        bad = (torch.isnan(scores) | torch.isposinf(scores)).any(-1, keepdim=True)  # [B, 1]
        scores = torch.where(bad, 0.0, scores)
        finite = ~bad.any()
        self.finite = finite if self.finite is None else self.finite & finite
        if self.pending is not None:
            self.collect(input_ids[:, -1])
        self.pending = torch.log_softmax(scores.float(), dim=-1)
        if self.record_kept:
            self.kept.append(kept_ids(torch.isfinite(scores)))
        return scores

    def kept_sets(self, steps: int) -> torch.Tensor:
        """[B, T, K] the kept ids of the first `steps` sampled positions, each step's padded with -1 to the
        widest set."""
        width = max(k.shape[1] for k in self.kept[:steps])
        return torch.stack([torch.nn.functional.pad(k, (0, width - k.shape[1]), value=-1) for k in self.kept[:steps]],
                           dim=1)

    def collect(self, tokens: torch.Tensor) -> None:
        if self.pending is None:
            raise RuntimeError("a sampled token to collect before the step's scores were recorded")
        self.gathered.append(self.pending.gather(-1, tokens[:, None]).squeeze(-1))
        self.pending = None


class HFEngine:
    name = "hf"
    returns_routing = True  # with SamplingParams.capture_routing

    def __init__(self, pad_id: int, eos_id: int, dtype: str = "float32", decode: str | None = None,
                 graph: bool | None = None, copy_weights: bool | None = None, router_noise: float = 0.0,
                 logit_noise: float = 0.0, kv_cache_gib: float | None = None, max_prompt_tokens: int | None = None):
        if decode is not None and decode not in DECODES:
            raise ValueError(f"hf engine: decode must be one of {', '.join(DECODES)}, got {decode!r}")
        for option, value in (("graph", graph), ("copy_weights", copy_weights)):
            if value is not None and not isinstance(value, bool):  # a string "false" would read as true
                raise ValueError(f"hf engine: {option} must be true or false (or left out), got {value!r}")
        if graph and decode == "generate":
            raise ValueError("hf engine: graph: true needs decode: static")
        self.pad_id = pad_id
        self.eos_id = eos_id
        self.decode = decode  # None: static on CUDA, generate elsewhere
        self.graph = graph  # None: on for static decoding on CUDA
        self.copy_weights = copy_weights  # None: a bf16 rollout copy on CUDA
        self.router_noise = check_sigma(router_noise)  # std of the router-logit noise while generating (0: off)
        self.logit_noise = check_sigma(logit_noise, "logit_noise")  # std of the final-logit noise (0: off)
        self.weights = RolloutWeights({"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype])
        self.kv_cache_gib = kv_cache_gib  # rows generated in chunks whose KV cache fits it (None: one batch)
        self.max_prompt_tokens = max_prompt_tokens  # longer prompts are refused (None: no limit)

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Refresh the rollout copy from the policy (nothing to do in fp32: it samples from the model)."""
        if RolloutWeights.applies(model, self.weights.dtype, self.copy_weights):
            self.weights.refresh(model)

    def sampler(self, model: torch.nn.Module) -> torch.nn.Module:
        """What generates: the rollout copy (made now if `sync_weights` was never called), or `model`."""
        if not RolloutWeights.applies(model, self.weights.dtype, self.copy_weights):
            return model
        return self.weights.model if self.weights.model is not None else self.weights.refresh(model)

    @torch.no_grad()
    def generate(self, model: torch.nn.Module, prompts: list[list[int]], params: SamplingParams) -> Rollout:
        if params.temperature <= 0 or not 0 < params.top_p <= 1:
            raise ValueError("hf engine: temperature must be > 0 and top_p in (0, 1]")
        check_prompt_lengths(prompts, self.max_prompt_tokens)
        sampler = self.sampler(model)
        device = next(sampler.parameters()).device
        rows = [p for p in prompts for _ in range(params.group_size)]  # groups of G consecutive rows
        prompt_ids, prompt_mask = left_pad(rows, self.pad_id)
        prompt_ids, prompt_mask = prompt_ids.to(device), prompt_mask.to(device)
        keys = torch.tensor(params.row_keys if params.row_keys is not None else range(len(rows)))
        if len(keys) != len(rows):
            raise ValueError(f"hf engine: {len(keys)} row keys for {len(rows)} rows")
        was_training = sampler.training
        sampler.eval()
        # the copy is already in the rollout dtype: autocast would only add a cast check per op
        own_precision = torch.autocast(device.type, enabled=False) if sampler is not model else nullcontext()
        per_row = (prompt_ids.shape[1] + params.max_new_tokens) * kv_bytes_per_token(hf_model(sampler, "the KV-cache budget").config,
                                                                                     self.weights.dtype.itemsize)
        chunk = rows_per_chunk(len(rows), per_row, self.kv_cache_gib)
        decode = self._static if self.decoding(device, params) == "static" else self._generate
        inference = decodes_in_inference_mode(sampler, device, params)
        try:
            with own_precision, torch.inference_mode() if inference else nullcontext():
                # every chunk at the batch's prompt width, each row with its own key
                parts = [decode(sampler, prompt_ids[start : start + chunk], prompt_mask[start : start + chunk],
                                keys[start : start + chunk], params) for start in range(0, len(rows), chunk)]
                rollout = parts[0] if len(parts) == 1 else join_rollouts(parts, self.pad_id)
        finally:
            sampler.train(was_training)
        return outside_inference_mode(rollout) if inference else rollout

    def decoding(self, device: torch.device, params: SamplingParams) -> str:
        """The decode path: as set, else static on CUDA, unless under torchrun or where the kept sets of a
        top-p mask (which static decode cannot bound) are to be recorded."""
        if self.decode is not None:
            return self.decode
        unbounded_sets = params.record_kept and params.top_p < 1.0
        return "static" if device.type == "cuda" and not params.synced and not unbounded_sets else "generate"

    def _static(self, model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, keys: torch.Tensor,
                params: SamplingParams) -> Rollout:
        if params.synced:
            raise ValueError("hf engine: decode: static does not run under torchrun (FSDP2 forwards are collective); "
                             "use decode: generate")
        graph = self.graph if self.graph is not None else prompt_ids.device.type == "cuda"
        if graph and prompt_ids.device.type != "cuda":
            raise ValueError("hf engine: graph: true needs a CUDA device")
        if params.record_kept and (params.top_k <= 0 or params.top_p < 1.0):
            raise ValueError("hf engine: decode: static records each token's kept set (train.sampling_mask) under "
                             "rollout.top_k alone, in a buffer of 2k ids; a top-p set has no such bound: set "
                             "engine_options.decode: generate")
        rule = DecodeRule(eos_id=self.eos_id, pad_id=self.pad_id, seed=params.seed, temperature=params.temperature,
                          top_p=params.top_p, top_k=params.top_k, min_new_tokens=params.max_new_tokens if params.ignore_eos else 0,
                          logit_noise=self.logit_noise, kept_width=2 * params.top_k if params.record_kept else 0)
        state = static_decode(model, prompt_ids, prompt_mask, keys, params.max_new_tokens, rule,
                              params.capture_routing, graph, router_noise=self.router_noise)
        response_mask = mask_after_eos(state.tokens, self.eos_id)  # [B, T]
        width = int(response_mask.sum(-1).max())  # as generate: columns until every row has ended
        routing = state.routing[:, :, : prompt_ids.shape[1] + width - 1] if state.routing is not None else None
        kept = (static_kept_sets(state.kept, state.kept_count, state.finite, response_mask, width)
                if state.kept is not None else None)
        return self._rollout(prompt_ids, prompt_mask, state.tokens[:, :width], state.logp[:, :width], routing,
                             state.finite, kept)

    def _generate(self, model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, keys: torch.Tensor,
                  params: SamplingParams) -> Rollout:  # model: a causal LM (generate's self-typing fits no nn.Module)
        recorder = _RecordSamplingLogprobs(params.record_kept)
        processors = LogitsProcessorList()
        if self.logit_noise:  # on the logits, before the sampling rule (as the static decoder adds it)
            processors.append(LogitNoise(self.logit_noise, params.seed, keys, prompt_ids.shape[1]))
        if params.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(params.temperature))
        if params.top_k > 0:
            processors.append(TopKLogitsWarper(params.top_k))
        if params.top_p < 1.0:
            processors.append(TopPLogitsWarper(params.top_p))
        processors.append(recorder)  # the sampling distribution, before the noise that samples from it
        processors.append(GumbelNoise(params.seed, keys, prompt_ids.shape[1]))
        capture = RoutingCapture(model) if params.capture_routing else None
        noise = (RouterNoise(model, self.router_noise, params.seed, keys, prompt_ids.shape[1])
                 if self.router_noise else nullcontext())
        with noise, capture if capture is not None else nullcontext():  # noise first: the capture records it
            seqs = model.generate(  # greedy over scores + Gumbel noise: a sample from softmax(scores)
                input_ids=prompt_ids, attention_mask=prompt_mask, do_sample=False, logits_processor=processors,
                max_new_tokens=params.max_new_tokens, pad_token_id=self.pad_id,
                min_new_tokens=params.max_new_tokens if params.ignore_eos else 0,
                synced_gpus=params.synced, eos_token_id=self.eos_id,
                temperature=None, top_k=None, top_p=None,
            )
        response = seqs[:, prompt_ids.shape[1]:]  # [B, T]
        recorder.collect(response[:, -1])
        # [L, B, L - 1, k]: under synced_gpus a rank that has finished keeps stepping (its forwards
        # are collective) and those dummy positions are routed too: cut them off
        routing = capture.routing[:, :, : seqs.shape[1] - 1] if capture is not None else None
        kept = recorder.kept_sets(response.shape[1]) if params.record_kept else None
        return self._rollout(prompt_ids, prompt_mask, response, torch.stack(recorder.gathered, dim=1), routing,
                             recorder.finite, kept)

    def _rollout(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, response: torch.Tensor,
                 sampling_logp: torch.Tensor, routing: torch.Tensor | None, finite: torch.Tensor | None,
                 kept: torch.Tensor | None = None) -> Rollout:
        """The rollout of sampled `response` [B, T] and its log-probs (and kept sets [B, T, K]): masked after
        </s>, padded."""
        response_mask = mask_after_eos(response, self.eos_id)  # [B, T]
        if kept is not None:
            kept = torch.where(response_mask[..., None], kept, -1)
        sampling_logp = torch.where(response_mask, sampling_logp, torch.zeros_like(sampling_logp))
        response = torch.where(response_mask, response, torch.full_like(response, self.pad_id))
        return Rollout(input_ids=torch.cat([prompt_ids, response], dim=1),
                       attention_mask=torch.cat([prompt_mask, response_mask.long()], dim=1),
                       response_mask=response_mask, sampling_logp=sampling_logp, routing=routing, finite=finite,
                       sampling_kept=kept)


@register_engine("hf")
def make_hf_engine(pad_id: int, eos_id: int, dtype: str = "float32", decode: str | None = None,
                   graph: bool | None = None, copy_weights: bool | None = None, router_noise: float = 0.0,
                   logit_noise: float = 0.0, model_path: object = None, device: object = None,
                   kv_cache_gib: float | None = None, max_prompt_tokens: int | None = None,
                   **unknown: object) -> HFEngine:
    """`model_path` and `device` are the run's (the engine samples from the policy it is handed);
    `kv_cache_gib` and `max_prompt_tokens` are the suite's rollout fields."""
    if unknown:
        raise ValueError(f"hf engine: unknown engine_options {', '.join(sorted(unknown))}; valid: decode "
                         f"({' or '.join(DECODES)}), graph, copy_weights (true/false), router_noise (std >= 0), "
                         "logit_noise (std >= 0)")
    return HFEngine(pad_id=pad_id, eos_id=eos_id, dtype=dtype, decode=decode, graph=graph, copy_weights=copy_weights,
                    router_noise=router_noise, logit_noise=logit_noise, kv_cache_gib=kv_cache_gib,
                    max_prompt_tokens=max_prompt_tokens)
