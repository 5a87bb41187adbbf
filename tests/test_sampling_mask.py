"""Truncated sampling and its mask (rollout.top_k, train.sampling_mask; #58): log-probs renormalised over a kept
set equal the masked log-softmax, and their gradient its autograd's; the hf engine samples from the top k and
records each token's kept set; with the mask the learner's log-probs at the step's start equal the engine's
(the mismatch truncation makes, `mismatch/k3_kl_unmasked`, removed); kept sets survive chunked generation;
the settings that cannot carry a mask are refused."""

from __future__ import annotations

import pytest
import torch

from gspo_bench.config import SuiteError, parse_suite
from gspo_bench.models import build_char_tokenizer, build_tiny_moe
from gspo_bench.models.forward import response_forward
from gspo_bench.models.logprobs import gather_logprobs
from gspo_bench.rollout import SamplingParams, make_engine
from gspo_bench.rollout.batching import kept_ids, pad_kept
from gspo_bench.tasks import make_task
from gspo_bench.train.old_policy import old_policy_pass
from gspo_bench.train.policy import Policy
from gspo_bench.train.rollout import collect_rollout, draw_examples
from tests.helpers.distributed import gather_on_rank, rank_rollout

SIZES = dict(num_layers=2, hidden_size=32, expert_hidden=32, num_experts=4, top_k=2)


def masked_reference(logits: torch.Tensor, targets: torch.Tensor, kept: torch.Tensor, temperature: float):
    mask = torch.zeros(logits.shape, dtype=torch.bool)
    mask.scatter_(-1, kept.clamp(min=0), kept >= 0)
    return torch.log_softmax((logits / temperature).masked_fill(~mask, float("-inf")), -1).gather(
        -1, targets[..., None]).squeeze(-1)


def test_renormalised_log_probs_and_their_gradient_equal_the_masked_log_softmax():
    """Random kept sets of 4 of 7 tokens (one position keeps 3: a -1 pad), chunks of 2 rows, temperature 0.7:
    values and gradients equal autograd's through log_softmax of the logits with -inf off the kept set; with
    every token kept, the plain log-probs."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 7, dtype=torch.float64, generator=gen, requires_grad=True)
    kept = torch.stack([torch.randperm(7, generator=gen)[:4] for _ in range(6)]).view(2, 3, 4)
    kept[0, 1, 3] = -1
    targets = kept[..., 0].clone()
    ours = gather_logprobs(logits, targets, 0.7, chunk=2, kept=kept)
    reference = masked_reference(logits, targets, kept, 0.7)
    torch.testing.assert_close(ours.double(), reference, atol=1e-6, rtol=0)  # computed in fp32
    weights = torch.randn(2, 3, dtype=torch.float64, generator=gen)
    grad_ours, = torch.autograd.grad((ours * weights).sum(), logits)
    grad_reference, = torch.autograd.grad((reference * weights).sum(), logits)
    torch.testing.assert_close(grad_ours, grad_reference, atol=1e-6, rtol=0)
    every = torch.arange(7).expand(2, 3, 7)
    torch.testing.assert_close(gather_logprobs(logits, targets, 0.7, kept=every), gather_logprobs(logits, targets, 0.7))


def test_kept_ids_by_hand():
    mask = torch.tensor([[True, False, True, False], [False, False, False, True]])
    assert kept_ids(mask).tolist() == [[0, 2], [3, -1]]


@pytest.fixture(scope="module")
def sampled():
    """A tiny MoE's rollout of 2 prompts x 4 responses at top_k 3, kept sets recorded, and its old pass."""
    tokenizer = build_char_tokenizer()
    model = build_tiny_moe(vocab_size=len(tokenizer), seed=5, **SIZES)
    task = make_task("sort", max_len=3)
    params = SamplingParams(group_size=4, max_new_tokens=6, temperature=1.0, top_k=3, seed=0, record_kept=True)
    engine = make_engine("hf", pad_id=0, eos_id=2)
    batch = collect_rollout(Policy(model), engine, tokenizer, task, draw_examples(task, 2, 0), params)
    return model, batch, engine, tokenizer, task


def test_the_engine_samples_from_the_top_k_and_records_each_kept_set(sampled):
    model, batch, *_ = sampled
    kept, valid = batch.sampling_kept, batch.response_mask.bool()
    assert kept is not None and kept.shape[:2] == valid.shape and kept.shape[2] == 3
    assert ((kept >= 0).sum(-1)[valid] == 3).all() and (kept[~valid] == -1).all()
    tokens = batch.input_ids[:, -batch.n_response:]
    assert (kept == tokens[..., None]).any(-1)[valid].all()  # every sampled token is in its kept set
    with torch.no_grad():  # the kept sets are the model's own top 3 at each position
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, -batch.n_response - 1:-1]
    top = logits.topk(3, dim=-1).indices.sort(-1).values
    assert torch.equal(kept.sort(-1).values[valid], top[valid])


def test_with_the_mask_the_learner_at_the_steps_start_is_the_engine(sampled):
    """The old pass renormalises over the kept sets: its log-probs equal the engine's (k3 ~ 0), while over the
    full vocabulary they are lower and the mismatch truncation makes is logged as mismatch/k3_kl_unmasked."""
    model, batch, *_ = sampled
    old = old_policy_pass(Policy(model), batch, temperature=1.0)
    valid = batch.response_mask.bool()
    torch.testing.assert_close(old.logp[valid], batch.sampling_logp[valid], atol=1e-5, rtol=0)
    assert float(old.metrics["mismatch/k3_kl"]) < 1e-9
    assert float(old.metrics["mismatch/k3_kl_unmasked"]) > 1e-3
    with torch.no_grad():
        full, _ = response_forward(model, batch.input_ids, batch.attention_mask, batch.n_response)
    assert (full[valid] < batch.sampling_logp[valid] - 1e-4).all()  # truncation moved mass onto every kept token


def test_chunked_generation_keeps_the_kept_sets_row_for_row(sampled):
    model, batch, _, tokenizer, task = sampled
    chunked = make_engine("hf", pad_id=0, eos_id=2, kv_cache_gib=1e-5)  # 2 rows per chunk (4e-6 GiB a row)
    params = SamplingParams(group_size=4, max_new_tokens=6, temperature=1.0, top_k=3, seed=0, record_kept=True)
    again = collect_rollout(Policy(model), chunked, tokenizer, task, draw_examples(task, 2, 0), params)
    assert torch.equal(again.input_ids, batch.input_ids) and torch.equal(again.sampling_kept, batch.sampling_kept)


def suite(**train) -> dict:
    return {"name": "mask", "model": dict(SIZES), "task": {"name": "sort", "params": {"max_len": 3}},
            "warm_start": {"enabled": False}, "rollout": {"prompts_per_step": 2, "group_size": 4, "top_k": 3},
            "train": {"minibatches": 2, "sampling_mask": True, **train}, "budget": {"kind": "steps", "value": 1},
            "objectives": [{"name": "grpo"}]}


def test_settings_that_cannot_carry_a_mask_are_refused():
    assert parse_suite(suite()).train.sampling_mask
    untruncated = suite()
    untruncated["rollout"] = {"prompts_per_step": 2, "group_size": 4}
    with pytest.raises(SuiteError, match="every token is kept"):
        parse_suite(untruncated)
    with pytest.raises(SuiteError, match="fused head"):
        parse_suite(suite(logprob_chunk_tokens=64))
    with pytest.raises(ValueError, match="a top-p set has no such bound"):
        make_engine("hf", pad_id=0, eos_id=2, decode="static").generate(
            build_tiny_moe(seed=0, **SIZES), [[5, 6]], SamplingParams(group_size=2, max_new_tokens=2, top_k=3,
                                                                       top_p=0.9, record_kept=True))


def test_static_decode_records_the_kept_sets_generate_records(sampled):
    """decode: static (eager on CPU) samples the tokens `generate` samples at top_k 3, with the same log-probs
    and kept sets, row for row; cut to the widest set, by id, -1 past a response's end."""
    model, _, _, tokenizer, task = sampled
    prompts = [[5, 6, 7], [8, 9]]
    params = SamplingParams(group_size=4, max_new_tokens=8, temperature=1.0, top_k=3, seed=0, record_kept=True)
    generate = make_engine("hf", pad_id=0, eos_id=2, decode="generate").generate(model, prompts, params)
    static = make_engine("hf", pad_id=0, eos_id=2, decode="static").generate(model, prompts, params)
    assert torch.equal(static.input_ids, generate.input_ids)
    torch.testing.assert_close(static.sampling_logp, generate.sampling_logp, atol=1e-5, rtol=0)
    assert static.sampling_kept.shape[2] == 3 and torch.equal(static.sampling_kept, generate.sampling_kept)
    assert generate.response_mask.sum(-1).unique().numel() > 1  # responses of different lengths: ends masked


def test_a_kept_set_that_outgrew_the_static_buffer_is_refused():
    """Ties at the k-th score keep more than k ids; the static buffer holds 2k: a wider set (here 5 ids tied at
    k = 1, buffer 2) is refused at a response token, ignored past a response's end."""
    from gspo_bench.rollout.static_decode import DecodeState, record_kept_sets, static_kept_sets

    state = DecodeState(torch.zeros(2, 1, dtype=torch.long), torch.ones(2, 1), 2, torch.arange(2), n_moe=0, top_k=0,
                        kept_width=2)
    inf = float("-inf")
    record_kept_sets(torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0, inf], [inf, 1.0, inf, inf, inf, inf]]), state.kept,
                     state.kept_count, state.step)
    assert state.kept_count[:, 0].tolist() == [5, 1] and state.kept[1, 0].tolist() == [1, -1]
    cut = state.kept[0, 0].tolist()  # 2 of the 5 tied ids, by id
    assert cut == sorted(cut) and set(cut) < {0, 1, 2, 3, 4}
    response = torch.tensor([[False, False], [True, False]])  # row 0 ended before its first token
    assert static_kept_sets(state.kept, state.kept_count, state.finite, response, 1).tolist() == [[cut], [[1, -1]]]
    with pytest.raises(RuntimeError, match="ties at the k-th score kept 5"):
        static_kept_sets(state.kept, state.kept_count, state.finite, torch.ones(2, 2, dtype=torch.bool), 1)


def test_kept_sets_end_with_their_response():
    """Past a response's </s> (id 2) its positions keep nothing (-1), as its log-probs are 0 there."""
    engine = make_engine("hf", pad_id=0, eos_id=2)
    response = torch.tensor([[5, 2, 7], [5, 6, 7]])
    kept = torch.tensor([[[5, 6], [2, 9], [7, 8]], [[5, 1], [6, 2], [7, 3]]])
    rollout = engine._rollout(torch.tensor([[4], [4]]), torch.ones(2, 1, dtype=torch.long), response,
                              torch.zeros(2, 3), None, None, kept)
    assert rollout.sampling_kept.tolist() == [[[5, 6], [2, 9], [-1, -1]], [[5, 1], [6, 2], [7, 3]]]


def test_the_update_renormalises_as_the_old_pass_did(sampled):
    """With a zero learning rate every ratio pi / pi_old of the update is 1: the update's forwards renormalise
    over the same kept sets as the old pass (without them the ratio would be the kept mass, below 1)."""
    import copy

    from gspo_bench.config import TrainConfig
    from gspo_bench.objectives import get_objective
    from gspo_bench.train.optim import make_optimizer
    from gspo_bench.train.update import UpdateSettings, update_policy

    model, batch, *_ = sampled
    old = old_policy_pass(Policy(model), batch, temperature=1.0)
    trained = copy.deepcopy(model).train()
    policy = Policy(trained, make_optimizer(trained, TrainConfig(), lr=0.0))
    result = update_policy(policy, get_objective("grpo"), batch, old, torch.arange(len(batch)), 2, UpdateSettings())
    assert abs(float(result.metrics["ratio/token_max"]) - 1) < 1e-5 and abs(float(result.metrics["ratio/token_min"]) - 1) < 1e-5


def test_a_suite_asks_its_engine_for_the_top_k_and_the_kept_sets():
    from gspo_bench.runtime.distributed import World
    from gspo_bench.train.loop import sampling_params

    params = sampling_params(parse_suite(suite()), seed=0, step=1, world=World(), routing=True)
    assert (params.top_k, params.record_kept) == (3, True)
    plain = sampling_params(parse_suite({**suite(), "train": {"minibatches": 2}}), seed=0, step=1, world=World(),
                            routing=True)
    assert (plain.top_k, plain.record_kept) == (3, False)



def test_under_torchrun_every_rank_gathers_every_rows_kept_set(tmp_path):
    """Two gloo ranks (rank r holds rows r and r + 2): each ends with the 4 rows' kept sets, each padded with -1
    to the widest response and kept set of any rank."""
    import torch.multiprocessing as mp

    mp.spawn(gather_on_rank, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    parts = [pad_kept(rank_rollout(rank).sampling_kept, 4, 3) for rank in (0, 1)]
    expected = torch.stack([parts[0][0], parts[1][0], parts[0][1], parts[1][1]])
    for rank in (0, 1):
        assert torch.equal(torch.load(tmp_path / f"{rank}.pt"), expected)


def test_left_unset_a_gpu_decodes_a_top_p_mask_with_generate():
    """On CUDA the hf engine decodes static by default, but not where the mask meets top_p (a set static decode
    cannot bound) nor under torchrun; on CPU always generate. Set explicitly, the setting holds."""
    engine, cuda, cpu = make_engine("hf", pad_id=0, eos_id=2), torch.device("cuda"), torch.device("cpu")
    top_k = SamplingParams(group_size=2, max_new_tokens=2, top_k=3, record_kept=True)
    top_p = SamplingParams(group_size=2, max_new_tokens=2, top_k=3, top_p=0.9, record_kept=True)
    unmasked = SamplingParams(group_size=2, max_new_tokens=2, top_k=3, top_p=0.9)
    assert [engine.decoding(cuda, p) for p in (top_k, top_p, unmasked)] == ["static", "generate", "static"]
    assert engine.decoding(cpu, top_k) == "generate"
    assert make_engine("hf", pad_id=0, eos_id=2, decode="static").decoding(cuda, top_p) == "static"


def test_the_committed_mask_measurement_reads_as_its_readme_says():
    """experiments/sampling_mask/read.py on results/sampling_mask/pilot gives the numbers its README and
    docs/findings.md quote: k3 7.91e-4 per token without the mask, ~1e-13 with it, 7.78e-4 removed."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("mask_read", root / "experiments" / "sampling_mask" / "read.py")
    assert spec is not None and spec.loader is not None
    read = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(read)
    runs = read.per_run(root / "results" / "sampling_mask" / "pilot").set_index("run")
    off, on = runs.loc["grpo@sampling_mask=False-s100"], runs.loc["grpo@sampling_mask=True-s100"]
    assert (off["steps"], on["steps"]) == (45, 45)
    assert f"{off['mismatch/k3_kl']:.3g}" == "0.000791" and f"{off['mismatch/max_abs']:.3g}" == "0.104"
    assert on["mismatch/k3_kl"] < 1e-12 and f"{on['mismatch/k3_kl_unmasked']:.3g}" == "0.000778"
