"""The fused log-prob head (train.logprob_chunk_tokens): log-probs and entropies from the hidden
states in token chunks equal the plain head's in value and gradient (fp32), for every supported
family's head, tied embeddings, a biased head and the granite logit scaling included; it keeps no
[N, V] tensor for backward, and refuses the heads it cannot reproduce."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from gspo_bench.models import SUPPORTED_FAMILIES, build_tiny_moe
from gspo_bench.models.forward import response_forward
from gspo_bench.models.logprobs import LOGIT_DIVISORS

VOCAB = 41


def tiny(family: str, **kw) -> torch.nn.Module:
    model = build_tiny_moe(family, num_layers=2, hidden_size=32, num_experts=4, top_k=2, vocab_size=VOCAB,
                           expert_hidden=32, seed=3, **kw)
    if family in LOGIT_DIVISORS:
        setattr(model.config, LOGIT_DIVISORS[family], 4.0)  # the tiny config's 1.0 would hide a missing division
    return model.train()


def batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, VOCAB, (3, 9), generator=gen)
    attention = torch.ones_like(ids)
    attention[0, :3] = 0  # a left-padded row
    attention[2, -2:] = 0  # a response that ended early
    return ids, attention


def close_gradients(got: dict, expected: dict) -> None:
    """Equal up to fp32 summation order: rtol 1e-5, and an absolute 1e-6 of the model's largest gradient
    entry (the chunks add a projection's gradient in another order than one matmul does, and that noise
    flows back through every layer at the scale of the largest gradients: qwen3_next's A_log, whose own
    largest entry is 4e-4, moved 4e-9 at one thread; measured over every family at 1 and 2 threads, the
    largest excess over rtol is 1.7e-7 of the model's largest entry)."""
    assert got.keys() == expected.keys()
    scale = max(float(grad.abs().max()) for grad in expected.values())
    for name, grad in expected.items():
        assert_close(got[name], grad, rtol=1e-5, atol=1e-6 * scale, msg=name)


def logp_and_grads(model, ids, attention, head_chunk, temperature=0.7):
    """Log-probs, entropies (a second, no-grad call) and the gradient of a weighted sum of the log-probs
    with respect to every parameter."""
    model.zero_grad(set_to_none=True)
    logp, _ = response_forward(model, ids, attention, 5, temperature, head_chunk=head_chunk)
    weights = torch.linspace(-1.0, 2.0, logp.numel()).view_as(logp)
    (logp * weights).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    with torch.no_grad():
        logp_ng, entropy = response_forward(model, ids, attention, 5, temperature, with_entropy=True,
                                            head_chunk=head_chunk)
    assert torch.equal(logp_ng, logp.detach())
    return logp.detach(), entropy, grads


@pytest.mark.parametrize("family", SUPPORTED_FAMILIES)
def test_fused_head_equals_the_plain_head_on_every_family(family):
    model = tiny(family)
    ids, attention = batch()
    plain = logp_and_grads(model, ids, attention, head_chunk=None)
    fused = logp_and_grads(model, ids, attention, head_chunk=4)  # 15 positions: blocks of 4, 4, 4, 3
    assert_close(fused[0], plain[0], rtol=1e-5, atol=1e-6)
    assert_close(fused[1], plain[1], rtol=1e-5, atol=1e-6)
    close_gradients(fused[2], plain[2])


@pytest.mark.parametrize("case", ["tied", "bias"])
def test_fused_head_with_tied_embeddings_and_a_biased_head(case):
    model = tiny("qwen3_moe")
    if case == "tied":
        model.lm_head.weight = model.get_input_embeddings().weight
    else:
        head = torch.nn.Linear(32, VOCAB, bias=True)
        with torch.no_grad():
            head.weight.copy_(model.lm_head.weight)
            head.bias.copy_(torch.linspace(-2.0, 2.0, VOCAB))
        model.lm_head = head
    ids, attention = batch(1)
    plain = logp_and_grads(model, ids, attention, head_chunk=None, temperature=1.3)
    fused = logp_and_grads(model, ids, attention, head_chunk=2, temperature=1.3)
    assert_close(fused[0], plain[0], rtol=1e-5, atol=1e-6)
    close_gradients(fused[2], plain[2])
    if case == "bias":
        assert fused[2]["lm_head.bias"].abs().sum() > 0


@pytest.mark.parametrize(("head_chunk", "keeps_logits"), [(None, True), (3, False)])
def test_fused_head_keeps_no_logits_for_backward(head_chunk, keeps_logits):
    model = tiny("qwen3_moe")
    ids, attention = batch()
    saved: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        logp, _ = response_forward(model, ids, attention, 5, head_chunk=head_chunk)
    logits_like = [tuple(t.shape) for t in saved if t.dim() >= 2 and t.shape[-1] == VOCAB]  # [.., V] tensors
    assert bool(logits_like) == keeps_logits, logits_like


def test_fused_head_refuses_soft_capping_and_other_heads():
    model = tiny("qwen3_moe")
    ids, attention = batch()
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="soft-caps"):
        response_forward(model, ids, attention, 5, head_chunk=4)
    model.config.final_logit_softcapping = None
    model.lm_head = torch.nn.Sequential(model.lm_head)
    with pytest.raises(ValueError, match="nn.Linear"):
        response_forward(model, ids, attention, 5, head_chunk=4)


def test_fused_head_under_bf16_autocast_projects_in_bf16_like_the_plain_head():
    model = tiny("qwen3_moe")
    ids, attention = batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain, _ = response_forward(model, ids, attention, 5, head_chunk=None)
        fused, _ = response_forward(model, ids, attention, 5, head_chunk=4)
    assert fused.dtype == torch.float32
    # the same bf16 products (equal here; an fp32 projection of the same hidden states is 6e-4 away)
    assert_close(fused, plain, rtol=0, atol=1e-4)
    fused.sum().backward()
    assert model.lm_head.weight.grad.dtype == torch.float32 and model.lm_head.weight.grad.abs().sum() > 0
