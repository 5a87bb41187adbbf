"""The fast GPU path: the bf16 rollout copy, static-cache (CUDA-graph) decoding, grouped expert
matmuls under autocast. Their contracts are checked on CPU; the tests marked `gpu` check the same
on a CUDA device (skipped without one)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode

from gspo_bench.models import build_char_tokenizer, build_tiny_moe
from gspo_bench.models.forward import response_forward
from gspo_bench.rollout import SamplingParams, make_engine
from gspo_bench.train import precision
from gspo_bench.train.precision import Precision

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")


def tiny_model(tok, seed: int):
    return build_tiny_moe(vocab_size=len(tok), num_layers=2, hidden_size=64, expert_hidden=64, num_experts=4, seed=seed)


@pytest.fixture(scope="module")
def setup():
    tok = build_char_tokenizer()
    model = tiny_model(tok, seed=3)
    prompts = [tok.encode("12+3="), tok.encode("sort:3,1="), tok.encode("7=")]  # different lengths: left padding
    return tok, model, prompts


def frequent_token(model, prompts) -> int:
    """A token the model samples often: as </s>, rows end at different steps."""
    r = make_engine("hf", pad_id=0, eos_id=2).generate(model, prompts, SamplingParams(group_size=2, max_new_tokens=8))
    return int(r.response_ids[r.response_mask].mode().values)


# ---------------------------------------------------------------------------- static decoding
@pytest.mark.parametrize("temperature,top_p,ignore_eos", [(1.0, 1.0, False), (0.7, 0.9, False), (1.0, 1.0, True)])
def test_static_decode_samples_what_generate_samples(setup, temperature, top_p, ignore_eos):
    _, model, prompts = setup
    eos = frequent_token(model, prompts)
    params = SamplingParams(group_size=3, max_new_tokens=12, temperature=temperature, top_p=top_p, seed=7,
                            ignore_eos=ignore_eos, row_keys=tuple(range(20, 29)))
    eager = make_engine("hf", pad_id=0, eos_id=eos, decode="generate").generate(model, prompts, params)
    static = make_engine("hf", pad_id=0, eos_id=eos, decode="static").generate(model, prompts, params)
    assert torch.equal(static.input_ids, eager.input_ids)  # same tokens, same width (rows end alike)
    assert torch.equal(static.response_mask, eager.response_mask)
    assert_close(static.sampling_logp, eager.sampling_logp, atol=2e-6, rtol=0)
    attended = eager.attention_mask[:, :-1].bool()  # routing at padding positions means nothing
    assert torch.equal(static.routing[:, attended], eager.routing[:, attended])
    assert bool(static.finite)
    if not ignore_eos:
        assert (~eager.response_mask).any()  # some row ended before the others: the case is exercised


def test_static_decode_stops_where_generate_stops(setup):
    """Once every row has ended, both return the same width (not max_new_tokens)."""
    _, model, prompts = setup
    eos = 7  # a token this model samples often: these 4 rows end by their 15th token
    params = SamplingParams(group_size=2, max_new_tokens=40, seed=0)
    eager = make_engine("hf", pad_id=0, eos_id=eos, decode="generate").generate(model, prompts[:2], params)
    static = make_engine("hf", pad_id=0, eos_id=eos, decode="static").generate(model, prompts[:2], params)
    assert eager.response_mask.shape[1] < 40
    assert torch.equal(static.input_ids, eager.input_ids) and static.routing.shape == eager.routing.shape


def test_static_decode_logprobs_match_the_training_forward(setup):
    _, model, prompts = setup
    params = SamplingParams(group_size=2, max_new_tokens=10, temperature=0.8, seed=3)
    r = make_engine("hf", pad_id=0, eos_id=2, decode="static").generate(model, prompts, params)
    with torch.no_grad():
        logp, _ = response_forward(model, r.input_ids, r.attention_mask, r.response_mask.shape[1], temperature=0.8)
    assert_close(logp[r.response_mask], r.sampling_logp[r.response_mask], atol=1e-5, rtol=1e-5)


def test_static_decode_rows_depend_on_their_key_not_their_batch(setup):
    _, model, prompts = setup
    engine = make_engine("hf", pad_id=0, eos_id=2, decode="static")
    both = engine.generate(model, prompts[:2], SamplingParams(group_size=1, max_new_tokens=8, seed=4, row_keys=(5, 9)))
    alone = engine.generate(model, prompts[1:2], SamplingParams(group_size=1, max_new_tokens=8, seed=4, row_keys=(9,)))
    n = alone.response_mask[0].sum()
    assert torch.equal(both.response_ids[1, :n], alone.response_ids[0, :n])


def non_finite_logits(model, value: float, calls: int | None):
    """A hook that writes `value` into logit 5 of the model's first `calls` forwards (None: of every one)."""
    seen = []

    def hook(module, inputs, output):
        seen.append(1)
        if calls is None or len(seen) <= calls:
            return output.index_fill(-1, torch.tensor([5], device=output.device), value)
        return output

    return model.lm_head.register_forward_hook(hook)


@pytest.mark.parametrize("decode", ["generate", "static"])
@pytest.mark.parametrize("value,calls", [(float("nan"), None), (float("inf"), None), (float("nan"), 1)])
def test_both_decodes_flag_a_policy_with_non_finite_logits(setup, decode, value, calls):
    """NaN or +inf logits, at every step or at the first one only (a later finite step must not clear
    the flag), come back as `finite` False from either decode path; the rows are still sampled to
    the end, as many as from a finite policy."""
    _, model, prompts = setup
    engine = make_engine("hf", pad_id=0, eos_id=2, decode=decode)
    params = SamplingParams(group_size=2, max_new_tokens=6, seed=1, ignore_eos=True)
    handle = non_finite_logits(model, value, calls)
    try:
        broken = engine.generate(model, prompts, params)
    finally:
        handle.remove()
    assert not bool(broken.finite) and broken.response_mask.all()
    healthy = engine.generate(model, prompts, params)
    assert bool(healthy.finite) and broken.input_ids.shape == healthy.input_ids.shape


def test_both_decodes_flag_nan_and_plus_inf_scores_but_not_minus_inf():
    """-inf is a masked token (top-p, min_new_tokens), not a diverged policy; NaN and +inf are. A
    flagged row is zeroed (sampled uniformly), the others are left as they are."""
    from gspo_bench.rollout.hf import _RecordSamplingLogprobs
    from gspo_bench.rollout.static_decode import DecodeRule, DecodeState, processed_scores

    inf, nan = float("inf"), float("nan")
    scores = torch.tensor([[0.0, 1.0, 2.0, nan], [0.0, inf, 1.0, 2.0], [-inf, 0.0, 1.0, 2.0]])  # [B=3, V=4]
    rule = DecodeRule(eos_id=2, pad_id=0, min_new_tokens=0, temperature=1.0, top_p=1.0, seed=0)
    for rows, flagged in (([2], False), ([0, 2], True), ([1, 2], True), ([0, 1, 2], True)):
        state = DecodeState(torch.zeros(len(rows), 2, dtype=torch.long), torch.ones(len(rows), 2), 2,
                            torch.arange(len(rows)), n_moe=0, top_k=0)
        static = processed_scores(scores[rows], state, rule)
        recorder = _RecordSamplingLogprobs()
        generated = recorder(torch.zeros(len(rows), 1, dtype=torch.long), scores[rows])
        assert bool(state.finite) is (not flagged) and bool(recorder.finite) is (not flagged), rows
        for out in (static, generated):
            expected = torch.stack([torch.zeros(4) if r < 2 else scores[r] for r in rows])
            assert torch.equal(out, expected), rows


def test_static_decode_masks_eos_while_fewer_than_min_new_tokens_are_sampled():
    """Tokens 0 and 1 cannot be </s> at min_new_tokens = 2; token 2 can (as generate's
    MinNewTokensLogitsProcessor: blocked while the count of new tokens is below the minimum)."""
    from gspo_bench.rollout.static_decode import DecodeRule, DecodeState, processed_scores

    rule = DecodeRule(eos_id=2, pad_id=0, min_new_tokens=2, temperature=1.0, top_p=1.0, seed=0)
    state = DecodeState(torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 2), 4, torch.arange(1), n_moe=0, top_k=0)
    logits = torch.tensor([[0.5, -1.0, 3.0, 0.0]])
    for step, eos_score in ((0, float("-inf")), (1, float("-inf")), (2, 3.0), (3, 3.0)):
        state.step.fill_(step)
        scores = processed_scores(logits, state, rule)
        assert scores.tolist() == [[0.5, -1.0, eos_score, 0.0]], step
    assert bool(state.finite)  # -inf where </s> is blocked is no divergence


def test_engine_options_are_checked(setup):
    _, model, prompts = setup
    with pytest.raises(ValueError, match="unknown engine_options decod"):
        make_engine("hf", pad_id=0, eos_id=2, decod="static")
    with pytest.raises(ValueError, match="decode must be one of"):
        make_engine("hf", pad_id=0, eos_id=2, decode="graph")
    with pytest.raises(ValueError, match="graph: true needs decode: static"):
        make_engine("hf", pad_id=0, eos_id=2, decode="generate", graph=True)
    with pytest.raises(ValueError, match="needs a CUDA device"):
        make_engine("hf", pad_id=0, eos_id=2, decode="static", graph=True).generate(
            model, prompts, SamplingParams(group_size=2, max_new_tokens=2))
    with pytest.raises(ValueError, match="torchrun"):
        make_engine("hf", pad_id=0, eos_id=2, decode="static").generate(
            model, prompts, SamplingParams(group_size=2, max_new_tokens=2, synced=True))


def test_default_decoding_is_static_on_a_gpu_only():
    engine = make_engine("hf", pad_id=0, eos_id=2)
    params = SamplingParams(group_size=2, max_new_tokens=2)
    assert engine.decoding(torch.device("cuda"), params) == "static"
    assert engine.decoding(torch.device("cpu"), params) == "generate"
    assert engine.decoding(torch.device("cuda"), dataclasses.replace(params, synced=True)) == "generate"


# ---------------------------------------------------------------------------- the bf16 rollout copy
def test_the_bf16_copy_is_refreshed_in_place_after_an_update(setup):
    tok, _, prompts = setup
    model = tiny_model(tok, seed=5)
    engine = make_engine("hf", pad_id=0, eos_id=2, dtype="bfloat16", copy_weights=True)
    engine.sync_weights(model)
    copy = engine.weights.model
    pointers = [p.data_ptr() for p in copy.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(input_ids=torch.tensor([prompts[0]])).logits.sum().backward()
    optimizer.step()
    engine.sync_weights(model)
    assert engine.weights.model is copy and [p.data_ptr() for p in copy.parameters()] == pointers  # no new allocation
    for (name, master), mirrored in zip(model.named_parameters(), copy.parameters(), strict=True):
        assert mirrored.dtype == torch.bfloat16 and master.dtype == torch.float32, name
        assert torch.equal(mirrored, master.detach().to(torch.bfloat16)), name
    for (name, buffer), mirrored in zip(model.named_buffers(), copy.buffers(), strict=True):
        assert mirrored.dtype == buffer.dtype, name  # rotary frequencies keep their precision


def test_the_engine_samples_from_its_copy(setup):
    """The copy is the engine: its log-probs are the bf16 model's, not the fp32 master's."""
    tok, model, prompts = setup
    engine = make_engine("hf", pad_id=0, eos_id=2, dtype="bfloat16", copy_weights=True)
    engine.sync_weights(model)
    r = engine.generate(model, prompts, SamplingParams(group_size=2, max_new_tokens=6, seed=2))
    with torch.no_grad():
        bf16_logp, _ = response_forward(engine.weights.model, r.input_ids, r.attention_mask, r.response_mask.shape[1])
        fp32_logp, _ = response_forward(model, r.input_ids, r.attention_mask, r.response_mask.shape[1])
    valid = r.response_mask
    assert_close(r.sampling_logp[valid], bf16_logp[valid].float(), atol=1e-4, rtol=0)
    assert (r.sampling_logp[valid] - fp32_logp[valid]).abs().max() > 1e-3  # bf16 is not fp32


def test_the_copy_is_made_on_a_gpu_and_in_bf16_only(setup):
    from gspo_bench.rollout.hf import RolloutWeights

    _, model, _ = setup
    assert not RolloutWeights.applies(model, torch.bfloat16, None)  # CPU: autocast over the fp32 weights
    assert RolloutWeights.applies(model, torch.bfloat16, True)
    assert not RolloutWeights.applies(model, torch.float32, True)  # fp32 samples from the model itself
    engine = make_engine("hf", pad_id=0, eos_id=2, dtype="bfloat16")
    engine.sync_weights(model)
    assert engine.weights.model is None


@pytest.mark.parametrize("dtype,device,sharded,copy_weights,expected", [
    (torch.bfloat16, "cuda", False, None, True),  # the default on a GPU
    (torch.bfloat16, "cuda", False, False, False),  # copy_weights: false is obeyed on a GPU too
    (torch.bfloat16, "cuda", False, True, True),
    (torch.bfloat16, "cpu", False, None, False),  # CPU: autocast over the fp32 weights
    (torch.bfloat16, "cpu", False, True, True),
    (torch.bfloat16, "cpu", False, False, False),
    (torch.bfloat16, "cuda", True, True, False),  # sharded (FSDP2): never, whatever it says
    (torch.float32, "cuda", False, True, False),  # fp32 samples from the model itself
    (torch.float32, "cpu", False, None, False),
])
def test_the_copy_decision_on_every_device(dtype, device, sharded, copy_weights, expected):
    from gspo_bench.rollout.hf import wants_copy

    assert wants_copy(dtype, device, sharded, copy_weights) is expected


def test_the_engine_takes_copy_weights_from_the_suite_and_refuses_a_non_boolean(tmp_path):
    from gspo_bench.config import SuiteConfig
    from gspo_bench.rollout.hf import wants_copy
    from gspo_bench.train.setup import make_run_engine

    base = {"name": "s", "task": {"name": "sort"}, "budget": {"kind": "steps", "value": 1},
            "objectives": [{"name": "grpo"}], "rollout": {"dtype": "bfloat16", "engine_options": {"copy_weights": False}}}
    tok = build_char_tokenizer()
    engine = make_run_engine(SuiteConfig.model_validate(base), tok, tmp_path, torch.device("cpu"))
    assert engine.copy_weights is False and not wants_copy(engine.weights.dtype, "cuda", False, engine.copy_weights)
    for option in ("copy_weights", "graph"):
        with pytest.raises(ValueError, match=f"{option} must be true or false .* got 'false'"):
            make_engine("hf", pad_id=0, eos_id=2, dtype="bfloat16", **{option: "false"})


def test_a_run_refreshes_the_copy_before_every_rollout(setup, monkeypatch):
    """`collect_rollout` pushes the policy's weights into the engine first (a stale copy would sample
    from the weights of an earlier step)."""
    from gspo_bench.tasks import make_task
    from gspo_bench.train.policy import Policy
    from gspo_bench.train.rollout import collect_rollout, draw_examples

    tok, _, _ = setup
    model = tiny_model(tok, seed=5)
    engine = make_engine("hf", pad_id=0, eos_id=2, dtype="bfloat16", copy_weights=True)
    task = make_task("countdown", count=3)
    params = SamplingParams(group_size=2, max_new_tokens=4)
    collect_rollout(Policy(model), engine, tok, task, draw_examples(task, 2, 0), params)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)
    collect_rollout(Policy(model), engine, tok, task, draw_examples(task, 2, 1), params)
    for master, mirrored in zip(model.parameters(), engine.weights.model.parameters(), strict=True):
        assert torch.equal(mirrored, master.detach().to(torch.bfloat16))


# ---------------------------------------------------------------------------- grouped matmuls under autocast
class GroupedMMDtypes(TorchDispatchMode):
    """Records the operand dtypes every grouped matmul runs with (below autocast)."""

    def __init__(self):
        super().__init__()
        self.seen: list[tuple[torch.dtype, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if "_grouped_mm" in str(func):
            self.seen.append(tuple(a.dtype for a in args[:2]))
        return func(*args, **(kwargs or {}))


def test_autocast_runs_the_experts_grouped_matmuls_in_bf16(setup):
    """The rule (registered for CUDA by Precision; registered for CPU here to check it): without it
    transformers casts the expert input to the fp32 weight and the matmul runs in fp32."""
    _, model, prompts = setup
    ids = torch.tensor([prompts[1]])
    precision.register_grouped_mm_autocast("cpu")
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16), GroupedMMDtypes() as ruled:
            loss = model(input_ids=ids).logits.float().sum()
        loss.backward()  # the fp32 masters get their gradient through the cast
        experts = model.model.layers[0].mlp.experts
        assert experts.gate_up_proj.grad is not None and experts.gate_up_proj.grad.dtype == torch.float32
    finally:
        precision.unregister_grouped_mm_autocast("cpu")
        model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16), GroupedMMDtypes() as plain, torch.no_grad():
        model(input_ids=ids)
    assert ruled.seen and all(d == (torch.bfloat16, torch.bfloat16) for d in ruled.seen)
    assert plain.seen and all(d == (torch.float32, torch.float32) for d in plain.seen)


@pytest.mark.parametrize("shape,aligned", [
    ((5, 8), True), ((5, 16), True), ((5, 12), False), ((5, 4), False),  # [tokens, K]: tokens may be anything
    ((3, 8, 16), True), ((7, 8, 8), True), ((3, 8, 12), False), ((3, 12, 8), False),  # [E, K, N]: E may be anything
])
def test_alignment_is_of_the_inner_dimensions_in_multiples_of_8(shape, aligned):
    assert precision._aligned(torch.empty(shape)) is aligned


@pytest.mark.parametrize("k,n,cast", [(16, 16, True), (8, 24, True), (16, 12, False), (12, 16, False)])
def test_the_autocast_rule_casts_only_when_every_operand_is_aligned(k, n, cast):
    """x [5, K] @ w [2, K, N] in groups of 2 and 3 tokens under bf16 autocast: cast when K and N are
    both multiples of 8; left fp32 when either is not (one aligned operand is not enough: a bf16
    grouped matmul on 16-byte-misaligned rows fails)."""
    x = torch.arange(5 * k, dtype=torch.float32).reshape(5, k) / 100
    w = torch.arange(2 * k * n, dtype=torch.float32).reshape(2, k, n) / 1000
    offs = torch.tensor([2, 5], dtype=torch.int32)
    expected = torch.cat([x[:2] @ w[0], x[2:] @ w[1]])  # [5, N]
    precision.register_grouped_mm_autocast("cpu")
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16), GroupedMMDtypes() as ruled:
            out = torch._grouped_mm(x, w, offs=offs)
    finally:
        precision.unregister_grouped_mm_autocast("cpu")
    dtype = torch.bfloat16 if cast else torch.float32
    assert ruled.seen == [(dtype, dtype)] and out.dtype == dtype
    assert_close(out.float(), expected, **({"atol": 0.05, "rtol": 0.02} if cast else {}))


def test_bf16_training_precision_registers_the_rule_on_cuda_only():
    precision.unregister_grouped_mm_autocast("cuda")
    with Precision.named("bfloat16", "cpu").autocast():
        pass
    assert "cuda" not in precision._GROUPED_MM_AUTOCAST and "cpu" not in precision._GROUPED_MM_AUTOCAST
    Precision.named("bfloat16", "cuda").autocast()  # builds the context (needs no device) and registers
    assert "cuda" in precision._GROUPED_MM_AUTOCAST


# ---------------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
@needs_cuda
def test_gpu_bf16_copy_equals_the_master_weights_after_an_update(setup):
    tok, _, prompts = setup
    model = tiny_model(tok, seed=5).cuda()
    engine = make_engine("hf", pad_id=0, eos_id=2, dtype="bfloat16")  # the default copy on a GPU
    engine.sync_weights(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    with Precision.named("bfloat16", "cuda").autocast():
        loss = model(input_ids=torch.tensor([prompts[0]], device="cuda")).logits.float().sum()
    loss.backward()
    optimizer.step()
    engine.sync_weights(model)
    for master, mirrored in zip(model.parameters(), engine.weights.model.parameters(), strict=True):
        assert torch.equal(mirrored, master.detach().to(torch.bfloat16))


@pytest.mark.gpu
@needs_cuda
def test_gpu_graph_decode_logprobs_match_a_forward_on_the_sampled_tokens(setup):
    tok, model, prompts = setup
    model = tiny_model(tok, seed=3).cuda()
    engine = make_engine("hf", pad_id=0, eos_id=2, dtype="bfloat16")  # copy + static + graph by default
    params = SamplingParams(group_size=4, max_new_tokens=24, seed=9)
    r = engine.generate(model, prompts, params)
    eager = make_engine("hf", pad_id=0, eos_id=2, dtype="bfloat16", decode="static", graph=False)
    assert torch.equal(eager.generate(model, prompts, params).input_ids, r.input_ids)  # graph replay = eager steps
    with torch.no_grad():
        logp, _ = response_forward(engine.weights.model, r.input_ids, r.attention_mask, r.response_mask.shape[1])
    valid = r.response_mask
    assert_close(r.sampling_logp[valid], logp[valid].float(), atol=0.05, rtol=0)  # bf16 kernels differ by shape
    assert r.routing is not None and r.routing.shape[2] == r.input_ids.shape[1] - 1


@pytest.mark.gpu
@needs_cuda
def test_gpu_graph_decode_records_the_kept_sets_eager_decode_records(setup):
    """train.sampling_mask at top_k 3 under decode: static (#58): the CUDA graph's replay writes the kept sets
    the eager steps write (on CPU the eager steps equal generate's: test_sampling_mask.py), each holds its
    sampled token and at least k ids (more only where bf16 scores tie at the k-th)."""
    tok, _, prompts = setup
    model = tiny_model(tok, seed=3).cuda()
    params = SamplingParams(group_size=4, max_new_tokens=24, seed=9, top_k=3, record_kept=True)
    graph = make_engine("hf", pad_id=0, eos_id=2, dtype="bfloat16", decode="static").generate(model, prompts, params)
    eager = make_engine("hf", pad_id=0, eos_id=2, dtype="bfloat16", decode="static", graph=False).generate(
        model, prompts, params)
    assert torch.equal(graph.input_ids, eager.input_ids) and torch.equal(graph.sampling_kept, eager.sampling_kept)
    valid = graph.response_mask.bool()
    tokens = graph.input_ids[:, -valid.shape[1]:]
    assert (graph.sampling_kept == tokens[..., None]).any(-1)[valid].all()
    assert ((graph.sampling_kept >= 0).sum(-1)[valid] >= 3).all() and (graph.sampling_kept[~valid] == -1).all()


@pytest.mark.gpu
@needs_cuda
def test_gpu_bf16_experts_loss_matches_fp32_experts_within_bf16_tolerance(setup):
    tok, _, prompts = setup
    model = tiny_model(tok, seed=5).cuda()
    ids = torch.tensor([prompts[1]] * 4, device="cuda")
    losses = []
    for rule in (False, True):
        if rule:
            precision.register_grouped_mm_autocast("cuda")
        else:
            precision.unregister_grouped_mm_autocast("cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16), GroupedMMDtypes() as seen, torch.no_grad():
            losses.append(torch.log_softmax(model(input_ids=ids).logits.float(), -1).mean())
        assert all(d == ((torch.bfloat16,) * 2 if rule else (torch.float32,) * 2) for d in seen.seen)
    assert_close(losses[1], losses[0], atol=0.02, rtol=0.01)
