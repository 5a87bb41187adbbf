from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gspo_bench.models import (
    SUPPORTED_FAMILIES,
    UnsupportedModelError,
    build_char_tokenizer,
    build_tiny_moe,
    family_of,
    load_moe,
    save_model,
)
from gspo_bench.models.forward import response_forward
from gspo_bench.models.logprobs import entropies, gather_logprobs
from gspo_bench.rollout import position_ids


@pytest.mark.parametrize("family", SUPPORTED_FAMILIES)
def test_tiny_moe_builds_runs_and_has_no_aux_loss(family):
    model = build_tiny_moe(family, num_layers=2, hidden_size=32, num_experts=4, top_k=2, vocab_size=40)
    assert family_of(model) == family
    ids = torch.randint(4, 40, (2, 7))
    out = model(input_ids=ids, labels=ids)
    assert out.logits.shape == (2, 7, 40)
    # with the aux loss off, `loss` is the plain LM loss
    manual = torch.nn.functional.cross_entropy(out.logits[:, :-1].reshape(-1, 40), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, manual)
    out.loss.backward()
    assert model.config.pad_token_id == 0 and model.config.eos_token_id == 2


def test_aux_loss_only_when_asked():
    model = build_tiny_moe("olmoe", num_layers=2, hidden_size=32, num_experts=4, vocab_size=40, aux_loss=True)
    ids = torch.randint(4, 40, (2, 7))
    out = model(input_ids=ids, labels=ids)
    assert out.aux_loss is not None


def test_init_is_deterministic_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_tiny_moe(seed=5, num_layers=1)
    after = torch.rand(1)
    b = build_tiny_moe(seed=5, num_layers=1)
    assert torch.equal(before, after)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


def test_bad_family_and_sizes():
    with pytest.raises(UnsupportedModelError, match="qwen3_moe"):
        build_tiny_moe("llama")
    with pytest.raises(ValueError, match="top_k"):
        build_tiny_moe(num_experts=4, top_k=5)
    with pytest.raises(TypeError, match="unknown tiny-model fields"):
        build_tiny_moe(layers=3)


def test_char_tokenizer_round_trip_and_hf_format(tmp_path):
    tok = build_char_tokenizer()
    text = "12+34=46"
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text) and tok.decode(ids) == text
    model = build_tiny_moe(vocab_size=len(tok), num_layers=1)
    save_model(model, tok, tmp_path / "ckpt")
    tok2 = AutoTokenizer.from_pretrained(tmp_path / "ckpt", local_files_only=True)
    assert tok2(text)["input_ids"] == ids
    assert (tok2.pad_token_id, tok2.bos_token_id, tok2.eos_token_id) == (0, 1, 2)
    model2, tok3 = load_moe(tmp_path / "ckpt", dtype=torch.float32)
    x = torch.tensor([ids])
    torch.testing.assert_close(model2(input_ids=x).logits, model(input_ids=x).logits)


def test_load_refuses_dense_and_missing(tmp_path):
    from transformers import LlamaConfig

    dense = AutoModelForCausalLM.from_config(
        LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                    num_attention_heads=2, num_key_value_heads=1)
    )
    dense.save_pretrained(tmp_path / "dense")
    with pytest.raises(UnsupportedModelError, match="llama.*supported"):
        load_moe(tmp_path / "dense")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_moe(tmp_path / "nothing")


# ---------------------------------------------------------------------------- log-probs
@pytest.mark.parametrize("chunk", [1, 5, 1024])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_logprobs_match_log_softmax_in_value_and_gradient(chunk, temperature):
    torch.manual_seed(0)
    logits = (3 * torch.randn(3, 7, 11, dtype=torch.float64)).requires_grad_()
    targets = torch.randint(0, 11, (3, 7))
    weights = torch.randn(3, 7, dtype=torch.float64)
    reference = torch.log_softmax(logits / temperature, -1).gather(-1, targets[..., None]).squeeze(-1)
    (ref_grad,) = torch.autograd.grad((reference * weights).sum(), logits)
    logp = gather_logprobs(logits.float(), targets, temperature, chunk=chunk)
    assert logp.dtype == torch.float32 and logp.shape == (3, 7)
    torch.testing.assert_close(logp.double(), reference, atol=1e-5, rtol=1e-5)
    leaf = logits.detach().float().requires_grad_()
    (gather_logprobs(leaf, targets, temperature, chunk=chunk) * weights.float()).sum().backward()
    torch.testing.assert_close(leaf.grad.double(), ref_grad, atol=1e-5, rtol=1e-5)
    ent = entropies(logits.detach().float(), temperature, chunk=chunk)
    p = torch.softmax(logits.detach() / temperature, -1)
    torch.testing.assert_close(ent.double(), -(p * p.log()).sum(-1), atol=1e-5, rtol=1e-5)


def test_bf16_logprobs_keep_no_fp32_copy_of_the_logits():
    """Memory flat in vocabulary size: what autograd keeps is the bf16 logits, never an fp32 [B, T, V]."""
    batch, length, vocab = 4, 6, 5000
    logits = torch.randn(batch, length, vocab).bfloat16().requires_grad_()
    targets = torch.randint(0, vocab, (batch, length))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        logp = gather_logprobs(logits, targets, chunk=8)
    big_fp32 = [t for t in saved if t.dtype == torch.float32 and t.numel() >= 8 * vocab]
    assert not big_fp32, [tuple(t.shape) for t in big_fp32]
    logp.sum().backward()
    assert logits.grad.dtype == torch.bfloat16
    reference = torch.log_softmax(logits.detach().float(), -1).gather(-1, targets[..., None]).squeeze(-1)
    torch.testing.assert_close(logp.detach(), reference, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("family", SUPPORTED_FAMILIES)
def test_response_forward_equals_full_forward_log_softmax(family):
    model = build_tiny_moe(family, num_layers=2, hidden_size=32, num_experts=4, top_k=2, vocab_size=40)
    ids = torch.randint(4, 40, (3, 9))
    attention = torch.ones_like(ids)
    attention[0, :2] = 0  # a left-padded row
    logp, entropy = response_forward(model, ids, attention, n_response=4, temperature=0.5, with_entropy=True)
    full = model(input_ids=ids, attention_mask=attention, position_ids=position_ids(attention)).logits / 0.5
    expected = torch.log_softmax(full[:, -5:-1].float(), -1).gather(-1, ids[:, -4:, None]).squeeze(-1)
    torch.testing.assert_close(logp, expected, atol=1e-5, rtol=1e-5)
    p = torch.softmax(full[:, -5:-1].float(), -1)
    torch.testing.assert_close(entropy, -(p * p.log()).sum(-1), atol=1e-5, rtol=1e-5)
