"""The hf engine's controlled mismatches. Router noise (`router_noise: sigma`): the engine, and only
it, routes by top-k(router logits + sigma * z); it records the routing it used, so R3 can replay it.
Logit noise (`logit_noise: std`): the engine, and only it, samples from softmax((logits + std * z) / T)
and reports those log-probs; the trainer's are clean, so `mismatch/k3_kl` measures it."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from gspo_bench.models import build_char_tokenizer, build_tiny_moe
from gspo_bench.models.forward import response_forward
from gspo_bench.models.padding import position_ids
from gspo_bench.moe import RoutingCapture, find_routers
from gspo_bench.rollout import SamplingParams, make_engine
from gspo_bench.rollout.logit_noise import logit_gaussian
from gspo_bench.rollout.router_noise import NOISE_FAMILIES, RouterNoise, router_gaussian
from gspo_bench.train.old_policy import engine_gap
from gspo_bench.train.rollout import RolloutBatch, routing_for_training
from tests.helpers.moe import captured

DECODES = ("generate", "static")


@pytest.fixture(scope="module")
def setup():
    tok = build_char_tokenizer()
    model = build_tiny_moe(vocab_size=len(tok), num_layers=2, hidden_size=64, expert_hidden=64, num_experts=4, seed=3)
    prompts = [tok.encode("12+3="), tok.encode("sort:3,1="), tok.encode("7=")]  # different lengths: left padding
    return tok, model, prompts


def generate(model, prompts, sigma=None, decode="generate", logit_noise=None, **params):
    options = ({} if sigma is None else {"router_noise": sigma}) | ({} if logit_noise is None else {"logit_noise": logit_noise})
    engine = make_engine("hf", pad_id=0, eos_id=2, decode=decode, **options)
    return engine.generate(model, prompts, SamplingParams(**({"group_size": 2, "max_new_tokens": 10, "seed": 5} | params)))


def training_routing(model, r):
    """The unperturbed training forward's routing [L, B, L_seq - 1, k] of the rollout's tokens."""
    cap, _ = captured(model, r.input_ids, r.attention_mask, no_grad=True)
    return cap.routing[:, :, :-1]


def changed(a, b, mask):
    """Fraction of attended (layer, position) pairs whose expert set differs."""
    differs = (a.sort(-1).values != b.sort(-1).values).any(-1)  # [L, B, T]
    return float(differs[:, mask.bool()].float().mean())


# ---------------------------------------------------------------------------- the noise itself
def test_noise_is_counter_based_and_standard_normal():
    keys, positions = torch.tensor([5, 9, 11]), torch.arange(-4, 3)
    z = router_gaussian(7, keys, positions, 1, 8)  # [B, t, E]
    assert z.shape == (3, 7, 8) and z.dtype == torch.float32
    assert torch.equal(z, router_gaussian(7, keys, positions, 1, 8))  # a function of its arguments
    assert torch.equal(z[1:2], router_gaussian(7, torch.tensor([9]), positions, 1, 8))  # of the row's key, not its batch
    assert torch.equal(z[:, 2:3], router_gaussian(7, keys, positions[2:3], 1, 8))  # of the position, not the window
    for other in (router_gaussian(8, keys, positions, 1, 8), router_gaussian(7, keys + 1, positions, 1, 8),
                  router_gaussian(7, keys, positions + 1, 1, 8), router_gaussian(7, keys, positions, 0, 8),
                  router_gaussian(7, keys, positions, 1, 9)[..., 1:]):
        assert (other != z).float().mean() > 0.99  # seed, key, position, layer, expert all enter
    many = router_gaussian(0, torch.arange(200), torch.arange(-50, 50), 3, 16).double().flatten()  # 320,000 draws
    assert abs(many.mean()) < 0.01 and abs(many.std() - 1) < 0.01  # a uniform (std 0.29) or Gumbel (mean 0.58) fails
    assert abs((many**4).mean() - 3) < 0.05 and abs((many.abs() < 1).double().mean() - 0.6827) < 0.005


# ---------------------------------------------------------------------------- the engine
@pytest.mark.parametrize("decode", DECODES)
def test_zero_noise_changes_nothing(setup, decode):
    _, model, prompts = setup
    plain, zero = generate(model, prompts, decode=decode), generate(model, prompts, 0.0, decode=decode)
    assert torch.equal(plain.input_ids, zero.input_ids) and torch.equal(plain.routing, zero.routing)
    assert torch.equal(plain.sampling_logp, zero.sampling_logp)


@pytest.mark.parametrize("decode", DECODES)
def test_the_engine_routes_apart_from_training_and_leaves_training_alone(setup, decode):
    _, model, prompts = setup
    ids = torch.tensor([prompts[1]])
    with torch.no_grad():
        before = model(input_ids=ids).logits
    r = generate(model, prompts, 1.0, decode=decode)
    with torch.no_grad():
        after = model(input_ids=ids).logits
    assert torch.equal(before, after)  # the training forward is never perturbed
    assert all(not router.module._forward_hooks for router in find_routers(model))
    gap = changed(r.routing, training_routing(model, r), r.attention_mask[:, :-1])
    assert gap > 0.3  # the engine routes many tokens elsewhere: moe/rollout_gap has something to measure
    plain = generate(model, prompts, decode=decode)
    assert changed(plain.routing, training_routing(model, plain), plain.attention_mask[:, :-1]) == 0  # without noise


@pytest.mark.parametrize("decode", DECODES)
def test_replaying_the_recorded_routing_reproduces_the_engine_logprobs(setup, decode):
    """What R3 relies on: the engine records the perturbed routing it used."""
    _, model, prompts = setup
    r = generate(model, prompts, 1.0, decode=decode)
    valid = r.response_mask
    replay = routing_for_training(r.routing, r.input_ids.shape[1])
    with torch.no_grad(), RoutingCapture(model, replay=replay):
        replayed, _ = response_forward(model, r.input_ids, r.attention_mask, valid.shape[1])
    with torch.no_grad():
        plain, _ = response_forward(model, r.input_ids, r.attention_mask, valid.shape[1])
    assert_close(replayed[valid], r.sampling_logp[valid], atol=1e-5, rtol=1e-5)
    assert (plain[valid] - r.sampling_logp[valid]).abs().max() > 1e-3


@pytest.mark.parametrize("decode", DECODES)
def test_huge_noise_routes_by_the_noise_and_tiny_noise_by_the_logits(setup, decode):
    """Hand-checkable: sigma 1e4 picks top-k(z) of (seed, key, column - prompt width, layer); sigma 1e-6
    picks what the training forward picks (exact ties aside)."""
    _, model, prompts = setup
    keys = (20, 21, 22, 23, 24, 25)
    r = generate(model, prompts, 1e4, decode=decode, seed=9, row_keys=keys)
    n_layers, batch, length, k = r.routing.shape
    columns = torch.arange(length) - r.prompt_width
    noise_only = torch.stack([router_gaussian(9, torch.tensor(keys), columns, layer, 4).topk(k, dim=-1).indices
                              for layer in range(n_layers)])  # [L, B, T, k]
    assert changed(r.routing, noise_only, torch.ones(batch, length)) < 0.01
    assert changed(r.routing, training_routing(model, r), r.attention_mask[:, :-1]) > 0.5
    tiny = generate(model, prompts, 1e-6, decode=decode)
    assert changed(tiny.routing, training_routing(model, tiny), tiny.attention_mask[:, :-1]) == 0


@pytest.mark.parametrize("decode", DECODES)
def test_a_row_samples_the_same_tokens_alone_or_in_any_batch_with_noise(setup, decode):
    _, model, prompts = setup
    full = generate(model, prompts, 1.0, decode=decode, seed=11)
    rows = [p for p in prompts for _ in range(2)]
    for keys in ([3], [5, 0], [4, 1, 2]):
        part = generate(model, [rows[k] for k in keys], 1.0, decode=decode, group_size=1, seed=11, row_keys=tuple(keys))
        for i, key in enumerate(keys):
            n = int(full.response_mask[key].sum())
            assert torch.equal(part.response_ids[i, :n], full.response_ids[key, :n])
            span = [slice(r.prompt_width - len(rows[key]), r.prompt_width + n - 1) for r in (part, full)]  # its tokens
            assert torch.equal(part.routing[:, i, span[0]], full.routing[:, key, span[1]])


def test_static_decode_with_noise_samples_what_generate_samples(setup):
    _, model, prompts = setup
    params = {"group_size": 3, "max_new_tokens": 12, "temperature": 0.8, "seed": 7, "row_keys": tuple(range(20, 29))}
    eager = generate(model, prompts, 0.7, decode="generate", **params)
    static = generate(model, prompts, 0.7, decode="static", **params)
    assert torch.equal(static.input_ids, eager.input_ids) and torch.equal(static.response_mask, eager.response_mask)
    assert_close(static.sampling_logp, eager.sampling_logp, atol=2e-6, rtol=0)
    attended = eager.attention_mask[:, :-1].bool()
    assert torch.equal(static.routing[:, attended], eager.routing[:, attended])
    assert not torch.equal(eager.routing, generate(model, prompts, decode="generate", **params).routing)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_graph_decode_applies_and_records_the_noise(setup):
    """The noise inside a captured CUDA-graph step (positions from route_at): the replayed steps
    sample and record what eager static steps do."""
    tok, _, prompts = setup
    model = build_tiny_moe(vocab_size=len(tok), num_layers=2, hidden_size=64, expert_hidden=64, num_experts=4,
                           seed=3).cuda()
    params = SamplingParams(group_size=4, max_new_tokens=24, seed=9, ignore_eos=True)
    runs = [make_engine("hf", pad_id=0, eos_id=2, decode="static", graph=graph, router_noise=1.0).generate(
        model, prompts, params) for graph in (True, False)]
    assert torch.equal(runs[0].input_ids, runs[1].input_ids) and torch.equal(runs[0].routing, runs[1].routing)
    assert changed(runs[0].routing, training_routing(model, runs[0]).cuda(), runs[0].attention_mask[:, :-1]) > 0.3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_graph_decode_applies_the_logit_noise(setup):
    """The logit noise inside a captured CUDA-graph step (keyed by the device step counter): the replayed
    steps sample what eager static steps do, and not what a noise-free engine samples."""
    tok, _, prompts = setup
    model = build_tiny_moe(vocab_size=len(tok), num_layers=2, hidden_size=64, expert_hidden=64, num_experts=4,
                           seed=3).cuda()
    params = SamplingParams(group_size=4, max_new_tokens=24, seed=9, ignore_eos=True)
    runs = [make_engine("hf", pad_id=0, eos_id=2, decode="static", graph=graph, logit_noise=noise).generate(
        model, prompts, params) for graph, noise in ((True, 1.0), (False, 1.0), (True, 0.0))]
    assert torch.equal(runs[0].input_ids, runs[1].input_ids)
    assert_close(runs[0].sampling_logp, runs[1].sampling_logp, atol=1e-5, rtol=0)
    assert not torch.equal(runs[0].input_ids, runs[2].input_ids)


# ---------------------------------------------------------------------------- families and options
def tiny(family, **kw):
    sizes = dict(num_layers=2, hidden_size=32, num_experts=8, top_k=2, vocab_size=40, expert_hidden=32)
    return build_tiny_moe(family, seed=1, **(sizes | kw))


@pytest.mark.parametrize("family", NOISE_FAMILIES)
def test_every_noise_family_routes_by_the_noisy_logits_at_its_site(family):
    """At each family's site: tiny noise keeps the model's choice (selection is top-k over the logits),
    huge noise gives top-k(z), recorded as the model's own, with the weights a replay rebuilds."""
    model = tiny(family).eval()
    ids = torch.randint(4, 40, (3, 7), generator=torch.Generator().manual_seed(0))
    keys = torch.tensor([4, 8, 15])
    clean, _ = captured(model, ids, no_grad=True)
    with torch.no_grad(), RouterNoise(model, 1e-6, 3, keys, 7), RoutingCapture(model) as small:
        model(input_ids=ids)
    assert torch.equal(small.routing.sort(-1).values, clean.routing.sort(-1).values)
    with torch.no_grad(), RouterNoise(model, 1e4, 3, keys, 7), RoutingCapture(model) as huge:
        noisy = model(input_ids=ids).logits
    expected = torch.stack([router_gaussian(3, keys, torch.arange(-7, 0), layer, 8).topk(2, dim=-1).indices
                            for layer in range(huge.routing.shape[0])])
    assert torch.equal(huge.routing.sort(-1).values, expected.sort(-1).values)
    with torch.no_grad(), RoutingCapture(model, replay=huge.routing):
        assert_close(model(input_ids=ids).logits, noisy)


@pytest.mark.parametrize("family,kw", [("deepseek_v3", {}), ("glm4_moe", {}), ("dots1", {}), ("ernie4_5_moe", {}),
                                       ("llama4_text", {}), ("deepseek_v2", {"n_group": 2, "topk_group": 1})])
def test_other_selections_are_refused_naming_the_supported_families(setup, family, kw):
    _, _, prompts = setup
    model = tiny(family, **kw)
    with pytest.raises(ValueError, match="router_noise perturbs top-k over the router logits.*qwen3_moe, qwen2_moe"):
        generate(model, prompts, 0.5)
    assert all(not router.module._forward_hooks for router in find_routers(model))


def test_noise_under_a_replay_is_refused(setup):
    """A replay attached before the noise would silently override it."""
    _, model, prompts = setup
    ids = torch.tensor([prompts[0]])
    cap, _ = captured(model, ids, no_grad=True)
    with torch.no_grad(), RoutingCapture(model, replay=cap.routing), RouterNoise(model, 1.0, 0, torch.tensor([0]), 5):
        with pytest.raises(RuntimeError, match="under a replay"):
            model(input_ids=ids)
    assert all(not router.module._forward_hooks for router in find_routers(model))  # removed through the exception


def test_the_training_loop_measures_the_gap_and_r3_removes_the_mismatch(setup):
    """`engine_gap` (the old-policy pass's measurements): a routing gap and a log-prob mismatch with
    noise, none without; replaying the engine's routing (R3) removes the mismatch."""
    _, model, prompts = setup
    for sigma in (0.0, 1.0):
        r = generate(model, prompts, sigma, group_size=2, max_new_tokens=10)
        batch = RolloutBatch.scored(r, torch.arange(6, dtype=torch.float32), group_size=2)
        measured = {}
        for replay in (None, batch.routing):
            with torch.no_grad(), RoutingCapture(model, replay=replay) as cap:
                logp, _ = response_forward(model, batch.input_ids, batch.attention_mask, batch.n_response)
            measured[replay is None] = engine_gap(logp, cap.routing, batch)
        plain, r3 = measured[True], measured[False]
        if sigma == 0.0:
            assert float(plain["moe/rollout_gap"]) == 0 and float(plain["mismatch/k3_kl"]) < 1e-10
        else:
            assert float(plain["moe/rollout_gap"]) > 0.3 and float(plain["mismatch/k3_kl"]) > 1e-6
            assert float(r3["mismatch/k3_kl"]) < 1e-10  # the model's own choice still differs: the gap stays
            assert float(r3["moe/rollout_gap"]) == float(plain["moe/rollout_gap"])


# ---------------------------------------------------------------------------- logit noise
def test_logit_noise_is_counter_based_and_standard_normal():
    keys = torch.tensor([5, 9, 11])
    z = logit_gaussian(7, keys, 3, 50)  # [B, V]
    assert z.shape == (3, 50) and z.dtype == torch.float32
    assert torch.equal(z, logit_gaussian(7, keys, torch.tensor(3), 50))  # a 0-d position tensor: the same numbers
    assert torch.equal(z[1:2], logit_gaussian(7, torch.tensor([9]), 3, 50))  # of the row's key, not its batch
    assert torch.equal(z[:, :20], logit_gaussian(7, keys, 3, 20))  # of the vocab id, not the vocabulary's size
    for other in (logit_gaussian(8, keys, 3, 50), logit_gaussian(7, keys + 1, 3, 50), logit_gaussian(7, keys, 4, 50)):
        assert (other != z).float().mean() > 0.99  # seed, key and position all enter
    many = torch.cat([logit_gaussian(0, torch.arange(100), t, 1000) for t in range(4)]).double().flatten()  # 400,000
    assert abs(many.mean()) < 0.01 and abs(many.std() - 1) < 0.01  # a uniform (std 0.29) or Gumbel (mean 0.58) fails
    assert abs((many**4).mean() - 3) < 0.05 and abs((many.abs() < 1).double().mean() - 0.6827) < 0.005
    router = router_gaussian(0, torch.arange(100), torch.zeros(1, dtype=torch.long), 0, 1000)[:, 0].double().flatten()
    first = many[:100_000]  # position 0 against the router noise's layer 0, position 0: another stream
    assert abs(float(torch.corrcoef(torch.stack([first, router]))[0, 1])) < 0.01


@pytest.mark.parametrize("decode", DECODES)
def test_zero_logit_noise_is_bitwise_the_noise_free_engine(setup, decode):
    _, model, prompts = setup
    plain, zero = generate(model, prompts, decode=decode), generate(model, prompts, decode=decode, logit_noise=0.0)
    assert torch.equal(plain.input_ids, zero.input_ids) and torch.equal(plain.routing, zero.routing)
    assert torch.equal(plain.sampling_logp, zero.sampling_logp)
    noisy = generate(model, prompts, decode=decode, logit_noise=1.0)
    assert not torch.equal(plain.sampling_logp, noisy.sampling_logp)  # the comparison can fail


@pytest.mark.parametrize("decode", DECODES)
def test_the_engine_samples_from_the_noisy_logits_and_reports_their_logprobs(setup, decode):
    """By hand from the clean logits of one training forward: the engine's log-prob of response token t
    of row b is log_softmax((logits + std * z(seed, key_b, t)) / T) at that token, not the clean one.
    atol 1e-5: the engine's cached decode and one full forward differ by fp32 rounding (~1e-6)."""
    _, model, prompts = setup
    std, temperature, keys = 0.7, 0.8, (30, 31, 32, 33, 34, 35)
    r = generate(model, prompts, decode=decode, logit_noise=std, seed=4, temperature=temperature, row_keys=keys,
                 max_new_tokens=12)
    width, valid = r.prompt_width, r.response_mask
    with torch.no_grad():
        logits = model(input_ids=r.input_ids, attention_mask=r.attention_mask,
                       position_ids=position_ids(r.attention_mask)).logits[:, width - 1 : -1].float()  # [B, T, V]
    z = torch.stack([logit_gaussian(4, torch.tensor(keys), t, logits.shape[-1]) for t in range(valid.shape[1])], 1)
    tokens = r.response_ids[:, :, None]
    noisy = torch.log_softmax((logits + std * z) / temperature, -1).gather(-1, tokens).squeeze(-1)  # [B, T]
    clean = torch.log_softmax(logits / temperature, -1).gather(-1, tokens).squeeze(-1)
    assert_close(r.sampling_logp[valid], noisy[valid], atol=1e-5, rtol=0)
    assert (r.sampling_logp[valid] - clean[valid]).abs().max() > 0.1


@pytest.mark.parametrize("decode", DECODES)
def test_logit_noise_is_deterministic_per_seed_and_keyed_by_row(setup, decode):
    """The same seed and row key give the same tokens in a batch of 6 or of 2 in another order (another
    prompt width too); another seed other ones."""
    _, model, prompts = setup
    full = generate(model, prompts, decode=decode, logit_noise=1.0, seed=11)
    assert not torch.equal(full.sampling_logp, generate(model, prompts, decode=decode, logit_noise=1.0, seed=12).sampling_logp)
    rows, keys = [p for p in prompts for _ in range(2)], (5, 0)
    part = generate(model, [rows[k] for k in keys], decode=decode, logit_noise=1.0, group_size=1, seed=11, row_keys=keys)
    for i, key in enumerate(keys):
        n = int(full.response_mask[key].sum())
        assert n > 0 and torch.equal(part.response_ids[i, :n], full.response_ids[key, :n])


def test_static_decode_with_logit_noise_samples_what_generate_samples(setup):
    _, model, prompts = setup
    params = {"group_size": 3, "max_new_tokens": 12, "temperature": 0.8, "top_p": 0.9, "seed": 7,
              "row_keys": tuple(range(20, 29))}
    eager = generate(model, prompts, decode="generate", logit_noise=0.5, **params)
    static = generate(model, prompts, decode="static", logit_noise=0.5, **params)
    assert torch.equal(static.input_ids, eager.input_ids) and torch.equal(static.response_mask, eager.response_mask)
    assert_close(static.sampling_logp, eager.sampling_logp, atol=2e-6, rtol=0)
    assert not torch.equal(eager.input_ids, generate(model, prompts, decode="generate", **params).input_ids)


def test_the_old_policy_pass_measures_logit_noise_as_a_logprob_mismatch_with_routing_untouched(setup):
    """`engine_gap`: k3 KL > 0 with logit noise, ~0 without, and no routing gap either way (the
    engine's routers see the same tokens as the trainer's)."""
    _, model, prompts = setup
    for std in (0.0, 0.5):
        r = generate(model, prompts, logit_noise=std, group_size=2, max_new_tokens=10)
        batch = RolloutBatch.scored(r, torch.arange(6, dtype=torch.float32), group_size=2)
        with torch.no_grad(), RoutingCapture(model) as cap:
            logp, _ = response_forward(model, batch.input_ids, batch.attention_mask, batch.n_response)
        gap = engine_gap(logp, cap.routing, batch)
        assert float(gap["moe/rollout_gap"]) == 0
        assert (float(gap["mismatch/k3_kl"]) > 1e-3) if std else (float(gap["mismatch/k3_kl"]) < 1e-10)


@pytest.mark.parametrize("option", ["router_noise", "logit_noise"])
def test_an_engine_noise_option_is_checked_and_refused_on_vllm(option):
    assert getattr(make_engine("hf", pad_id=0, eos_id=2, **{option: 0.25}), option) == 0.25
    for bad in (-0.1, float("nan"), float("inf"), True, "0.5"):
        with pytest.raises(ValueError, match=f"{option} must be a finite number >= 0"):
            make_engine("hf", pad_id=0, eos_id=2, **{option: bad})
    with pytest.raises(ValueError, match=rf"unknown engine_options {option[:-1]};.*{option} \(std >= 0\)"):
        make_engine("hf", pad_id=0, eos_id=2, **{option[:-1]: 0.5})
    with pytest.raises(ValueError, match=f"{option} is an hf engine option"):
        make_engine("vllm", pad_id=0, eos_id=2, model_path="unused", **{option: 0.5})
