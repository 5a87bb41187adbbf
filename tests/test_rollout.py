from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from gspo_bench.models import build_char_tokenizer, build_tiny_moe
from gspo_bench.models.forward import response_forward
from gspo_bench.rollout import SamplingParams, left_pad, make_engine, mask_after_eos
from gspo_bench.train.compute import StepCompute, active_parameters


@pytest.fixture(scope="module")
def setup():
    tok = build_char_tokenizer()
    model = build_tiny_moe(vocab_size=len(tok), num_layers=2, hidden_size=32, expert_hidden=32, seed=3)
    prompts = [tok.encode("12+3="), tok.encode("sort:3,1="), tok.encode("7=")]  # different lengths
    return tok, model, prompts


def test_hf_engine_logprobs_match_the_training_forward(setup):
    tok, model, prompts = setup
    engine = make_engine("hf", pad_id=0, eos_id=2)
    for temperature in (1.0, 0.7):
        r = engine.generate(model, prompts, SamplingParams(group_size=3, max_new_tokens=8, temperature=temperature, seed=5))
        assert r.input_ids.shape[0] == 9 and r.response_mask.shape == r.sampling_logp.shape
        with torch.no_grad():
            logp, entropy = response_forward(model, r.input_ids, r.attention_mask, r.response_mask.shape[1],
                                             temperature=temperature, with_entropy=True)
        valid = r.response_mask
        assert_close(logp[valid], r.sampling_logp[valid], atol=1e-5, rtol=1e-5)
        assert (entropy[valid] > 0).all()
        # routing captured in generation: [L, B, L_seq - 1, k]
        assert r.routing.shape == (2, 9, r.input_ids.shape[1] - 1, 2)


def test_hf_engine_is_deterministic_and_groups_are_consecutive(setup):
    tok, model, prompts = setup
    engine = make_engine("hf", pad_id=0, eos_id=2)
    params = SamplingParams(group_size=4, max_new_tokens=6, seed=11)
    a, b = engine.generate(model, prompts, params), engine.generate(model, prompts, params)
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.sampling_logp, b.sampling_logp)
    c = engine.generate(model, prompts, SamplingParams(group_size=4, max_new_tokens=6, seed=12))
    assert not torch.equal(a.input_ids, c.input_ids)
    width = a.prompt_width
    for g in range(3):
        rows = a.input_ids[4 * g : 4 * g + 4, :width]
        assert (rows == rows[0]).all()  # the G rows of a group share their prompt
    # padding after </s> is masked everywhere
    assert (a.sampling_logp[~a.response_mask] == 0).all()
    assert (a.attention_mask[:, width:].bool() == a.response_mask).all()


def test_top_p_logprobs_are_of_the_truncated_distribution(setup):
    tok, model, prompts = setup
    engine = make_engine("hf", pad_id=0, eos_id=2)
    r = engine.generate(model, prompts, SamplingParams(group_size=2, max_new_tokens=5, top_p=0.5, seed=1))
    with torch.no_grad():
        full, _ = response_forward(model, r.input_ids, r.attention_mask, r.response_mask.shape[1])
    valid = r.response_mask
    assert (r.sampling_logp[valid] >= full[valid] - 1e-6).all()  # renormalised over the nucleus


def test_batching_helpers():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert mask_after_eos(torch.tensor([[4, 2, 5, 2], [4, 4, 4, 4]]), 2).tolist() == [
        [True, True, False, False], [True, True, True, True]]
    # </s> first, </s> last, </s> twice in a row: the first one ends the response and is part of it
    assert mask_after_eos(torch.tensor([[2, 4, 4], [4, 4, 2], [4, 2, 2]]), 2).tolist() == [
        [True, False, False], [True, True, True], [True, True, False]]
    with pytest.raises(ValueError):
        left_pad([[1], []], 0)


def test_unknown_engine():
    with pytest.raises(LookupError, match="valid engines: hf"):
        make_engine("vllm2", pad_id=0, eos_id=2)


def test_active_parameters_count_routed_experts_at_k_over_e():
    model = build_tiny_moe(num_layers=2, hidden_size=32, expert_hidden=16, num_experts=8, top_k=2, vocab_size=40)
    total = sum(p.numel() for p in model.parameters())
    embed = model.get_input_embeddings().weight.numel()
    experts = sum(p.numel() for name, p in model.named_parameters() if ".experts." in name)
    assert active_parameters(model) == total - embed - experts + experts * 2 // 8
    assert StepCompute(tokens_forward=10, tokens_trained=4).flops(100) == 2 * 100 * 10 + 6 * 100 * 4


def test_logprob_mismatch_small_case():
    import math

    from gspo_bench.rollout.mismatch import logprob_mismatch

    train = torch.tensor([[0.0, -1.0, -5.0], [-2.0, 0.0, 0.0]])
    rollout = torch.tensor([[0.0, -1.0 - math.log(3.0), -5.0], [-2.5, 0.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    stats = logprob_mismatch(train, rollout, mask)
    log_r = torch.tensor([0.0, math.log(3.0), 0.0, 0.5])
    assert stats["mismatch/k3_kl"] == pytest.approx(float((log_r.exp() - 1 - log_r).mean()))
    assert stats["mismatch/max_abs"] == pytest.approx(math.log(3.0))
    assert stats["mismatch/frac_gt_ln2"] == pytest.approx(1 / 4)  # ln 3 > ln 2 > 0.5


def test_logprob_mismatch_at_its_boundaries():
    """A ratio of exactly 2 or 1/2 (|log r| = ln 2, exact in fp64) is not beyond ln 2; no valid token: 0."""
    import math

    from gspo_bench.rollout.mismatch import logprob_mismatch

    train = torch.tensor([[0.0, -math.log(2.0), -1.0]], dtype=torch.float64)
    rollout = torch.tensor([[-math.log(2.0), 0.0, -1.0]], dtype=torch.float64)
    stats = logprob_mismatch(train, rollout, torch.ones(1, 3))
    assert stats["mismatch/frac_gt_ln2"] == 0.0 and stats["mismatch/max_abs"] == math.log(2.0)
    assert stats["mismatch/k3_kl"] == pytest.approx((2 - 1 - math.log(2.0) + 0.5 - 1 + math.log(2.0)) / 3)
    empty = logprob_mismatch(train, rollout, torch.zeros(1, 3))
    assert all(float(v) == 0.0 for v in empty.values())


def test_hf_engine_has_no_mismatch_at_top_p_one(setup):
    from gspo_bench.rollout.mismatch import logprob_mismatch

    tok, model, prompts = setup
    r = make_engine("hf", pad_id=0, eos_id=2).generate(model, prompts, SamplingParams(group_size=2, max_new_tokens=6, seed=3))
    with torch.no_grad():
        logp, _ = response_forward(model, r.input_ids, r.attention_mask, r.response_mask.shape[1])
    stats = logprob_mismatch(logp, r.sampling_logp, r.response_mask)
    assert stats["mismatch/max_abs"] < 1e-4 and stats["mismatch/frac_gt_ln2"] == 0.0


def test_gumbel_max_with_hashed_noise_samples_from_the_softmax():
    from gspo_bench.rollout.sampling import GumbelNoise, uniform

    u = uniform(7, torch.arange(4000), position=3, vocab=50)
    assert 0 < float(u.min()) and float(u.max()) < 1
    assert abs(float(u.mean()) - 0.5) < 0.005 and abs(float(u.var()) - 1 / 12) < 0.002
    assert abs(float(torch.corrcoef(torch.stack([u[:, 0], u[:, 1]]))[0, 1])) < 0.05  # tokens independent
    scores = torch.tensor([[2.0, 1.0, 0.0, -1.0, float("-inf")]]).expand(40000, 5)
    noise = GumbelNoise(seed=3, keys=torch.arange(40000), prompt_width=2)
    picks = noise(torch.zeros(40000, 2, dtype=torch.long), scores).argmax(-1)
    frequencies = torch.bincount(picks, minlength=5).double() / 40000
    expected = torch.softmax(scores[0].double(), -1)
    assert (frequencies - expected).abs().max() < 0.01 and frequencies[4] == 0  # -inf (top-p cut) never drawn
    again = noise(torch.zeros(40000, 3, dtype=torch.long), scores).argmax(-1)  # the next position: new draws
    assert (again != picks).float().mean() > 0.3


def test_a_row_samples_the_same_tokens_alone_or_in_any_batch(setup):
    tok, model, prompts = setup
    engine = make_engine("hf", pad_id=0, eos_id=2)
    full = engine.generate(model, prompts, SamplingParams(group_size=2, max_new_tokens=6, seed=11))
    rows = [p for p in prompts for _ in range(2)]
    for keys in ([3], [5, 0], [4, 1, 2]):  # any subset of rows, in any order, with their keys
        part = engine.generate(model, [rows[k] for k in keys],
                               SamplingParams(group_size=1, max_new_tokens=6, seed=11, row_keys=tuple(keys)))
        for i, key in enumerate(keys):
            n = int(full.response_mask[key].sum())
            assert int(part.response_mask[i].sum()) == n
            assert torch.equal(part.response_ids[i, :n], full.response_ids[key, :n])
            assert_close(part.sampling_logp[i, :n], full.sampling_logp[key, :n], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------- rows in chunks (rollout.kv_cache_gib)
@pytest.mark.parametrize("decode", ["generate", "static"])
def test_rows_in_kv_budget_chunks_give_the_tokens_logprobs_and_routes_of_one_batch(setup, decode):
    from gspo_bench.rollout.chunks import GIB, kv_bytes_per_token

    tok, model, prompts = setup
    params = SamplingParams(group_size=3, max_new_tokens=10, seed=4)
    whole = make_engine("hf", pad_id=0, eos_id=2, decode=decode).generate(model, prompts, params)
    width = max(len(p) for p in prompts) + 10
    per_row = width * kv_bytes_per_token(model.config, 4)
    assert per_row == width * 2 * 2 * 2 * 8 * 4  # 2 L n_kv d_head fp32 bytes per token
    budget = 4 * per_row / GIB  # chunks of 4, 4 and 1 of the 9 rows
    chunked = make_engine("hf", pad_id=0, eos_id=2, decode=decode, kv_cache_gib=budget).generate(model, prompts, params)
    assert torch.equal(chunked.response_mask, whole.response_mask)
    assert whole.response_mask.sum(-1).unique().numel() > 1  # responses of different lengths (EOS)
    assert torch.equal(chunked.input_ids, whole.input_ids) and torch.equal(chunked.attention_mask, whole.attention_mask)
    assert_close(chunked.sampling_logp, whole.sampling_logp, rtol=0, atol=1e-6)
    # positions that predict a token of the rollout: what log-probs depend on (a row's last token is
    # routed in one batch while other rows go on, never in a chunk that ends with it: see routing_for_training)
    mask = whole.attention_mask.bool()
    routed = mask[:, :-1] & mask[:, 1:]
    assert torch.equal(chunked.routing[:, routed], whole.routing[:, routed])


def test_a_kv_budget_is_the_hf_engines_alone():
    from pydantic import ValidationError

    from gspo_bench.config import RolloutConfig

    assert RolloutConfig(kv_cache_gib=1.0).kv_cache_gib == 1.0
    with pytest.raises(ValidationError, match="kv_cache_gib sizes the hf engine's row chunks; vllm manages its own KV "
                                              "cache"):
        RolloutConfig(engine="vllm", kv_cache_gib=1.0)


def test_a_budget_below_one_row_and_a_prompt_over_the_limit_are_refused(setup):
    tok, model, prompts = setup
    params = SamplingParams(group_size=1, max_new_tokens=4, seed=0)
    with pytest.raises(ValueError, match="below one row's KV cache"):
        make_engine("hf", pad_id=0, eos_id=2, kv_cache_gib=1e-9).generate(model, prompts, params)
    longest = max(len(p) for p in prompts)
    with pytest.raises(ValueError, match=f"a prompt of {longest} tokens is longer than rollout.max_prompt_tokens"):
        make_engine("hf", pad_id=0, eos_id=2, max_prompt_tokens=longest - 1).generate(model, prompts, params)
    out = make_engine("hf", pad_id=0, eos_id=2, max_prompt_tokens=longest).generate(model, prompts, params)
    assert out.input_ids.shape[0] == 3
