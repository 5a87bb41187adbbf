"""Warm start: a short supervised fine-tune of the tiny MoE on task solutions (the paper starts RL
from a cold-start fine-tuned model), stopped when test accuracy enters a band so that groups have
reward spread. Cached on disk under a hash of everything that affects the weights.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from gspo_bench.models.chat import PromptFormat
from gspo_bench.models.families import hf_model
from gspo_bench.models.tokenizer import EOS_ID, PAD_ID
from gspo_bench.rollout import SamplingParams, left_pad, make_engine, position_ids
from gspo_bench.rundir.checksums import damage, write_checksums
from gspo_bench.rundir.folder import share
from gspo_bench.runtime.hardware import require_device
from gspo_bench.runtime.kernels import kernel_key
from gspo_bench.tasks import Example, Task

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


# Warm starts shipped with the package (`make ship-warm-starts`): a cache entry each, under its key, checksummed
SHIPPED = Path(__file__).resolve().parent.parent / "warmstarts"


@dataclass(frozen=True)
class WarmStartParams:
    lr: float = 3e-3
    batch_size: int = 64
    max_steps: int = 2000
    eval_every: int = 25
    eval_examples: int = 64
    band: tuple[float, float] = (0.2, 0.6)  # test accuracy (sampled at the rollout temperature)
    temperature: float = 1.0
    max_new_tokens: int = 32
    seed: int = 0
    prompt_format: PromptFormat = PromptFormat()  # raw prompts, or rendered with the chat template
    device: str = "cpu"  # where the fine-tuning runs (the saved weights are the same either way)
    steps: int | None = None  # exactly this many steps, the band no stopping rule (None: stop in the band)


class WarmStartError(RuntimeError):
    pass


def cache_key(parts: dict) -> str:
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def sft_batch(tokenizer: PreTrainedTokenizerBase, examples: list[Example], prompt_format: PromptFormat = PromptFormat()
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded prompt+answer+</s> ids [B, L], attention mask [B, L] and loss mask [B, L - 1];
    prompts as the rollout renders them (`prompt_format`)."""
    rows, answer_lens = [], []
    for ex in examples:
        answer = tokenizer.encode(ex.answer) + [EOS_ID]
        rows.append(prompt_format.encode(tokenizer, ex.prompt) + answer)
        answer_lens.append(len(answer))
    ids, mask = left_pad(rows, PAD_ID)
    targets_mask = torch.zeros(ids.shape[0], ids.shape[1] - 1, dtype=torch.bool)
    for row, n in enumerate(answer_lens):
        targets_mask[row, -n:] = True  # predict only the answer and </s>
    return ids, mask, targets_mask


def sampled_accuracy(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, task: Task, examples: list[Example], params: WarmStartParams, seed: int) -> float:
    """Mean reward of one sampled response per test example (the rollout distribution)."""
    engine = make_engine("hf", pad_id=PAD_ID, eos_id=EOS_ID)
    rollout = engine.generate(
        model, [params.prompt_format.encode(tokenizer, ex.prompt) for ex in examples],
        SamplingParams(group_size=1, max_new_tokens=params.max_new_tokens, temperature=params.temperature,
                       seed=seed, capture_routing=False),
    )
    texts = tokenizer.batch_decode(rollout.response_ids, skip_special_tokens=True)
    return sum(task.reward(t, ex) for t, ex in zip(texts, examples)) / len(examples)


def finetune(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, task: Task, params: WarmStartParams,
             on_eval: Callable[[int, float], None] | None = None) -> dict[str, Any]:
    """SFT until sampled test accuracy is inside `params.band`; returns the accuracy history.

    If an evaluation jumps over the band, the weights of the evaluation nearest to the band are kept.
    Raises WarmStartError if the band is not reached within `max_steps`. With `params.steps`: exactly
    that many steps, evaluated every `eval_every` and at the end, and no stopping rule (`in_band` says
    where the accuracy reached lies). Both are one loop (`sft_loop`), told when to stop by the rule.
    """
    rule: StoppingRule = FixedSteps(params, params.steps) if params.steps is not None else BandStop(params)
    return sft_loop(model, tokenizer, task, params, rule, on_eval)


class StoppingRule(Protocol):
    """When `sft_loop` evaluates and stops: `last_step` bounds it; `evaluates(step)` says whether it
    samples the test accuracy before step `step`'s update; `stop` gives the result to end with after an
    evaluation (None: go on), and may restore earlier weights; `exhausted` ends a loop `stop` never
    ended."""

    @property
    def last_step(self) -> int: ...

    def evaluates(self, step: int) -> bool: ...

    def stop(self, model: torch.nn.Module, step: int, accuracy: float,
             history: list[tuple[int, float]]) -> dict[str, Any] | None: ...

    def exhausted(self, history: list[tuple[int, float]]) -> dict[str, Any]: ...


def sft_loop(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, task: Task, params: WarmStartParams,
             rule: StoppingRule, on_eval: Callable[[int, float], None] | None = None) -> dict[str, Any]:
    """The warm start's one training loop: SFT steps 0..`rule.last_step` - 1, the test accuracy sampled
    where `rule` evaluates (seeded by the step, so an evaluation draws nothing from the training's
    examples), ended by `rule`."""
    device = require_device(params.device, "warm_start.device")
    model.to(device)
    rng = random.Random(params.seed)
    test = task.test_examples(params.eval_examples)
    optimizer = sft_optimizer(model, params, device)
    history: list[tuple[int, float]] = []
    for step in range(rule.last_step + 1):
        if rule.evaluates(step):
            acc = sampled_accuracy(model, tokenizer, task, test, params, seed=params.seed + step)
            history.append((step, acc))
            if on_eval is not None:
                on_eval(step, acc)
            result = rule.stop(model, step, acc, history)
            if result is not None:
                return result
        if step < rule.last_step:
            sft_step(model, tokenizer, task, params, rng, optimizer, device)
    return rule.exhausted(history)


def _result(steps: int, accuracy: float, history: list[tuple[int, float]], band: tuple[float, float]) -> dict[str, Any]:
    """What finetune returns (warmstart.json's fields, in this order: the file's bytes are checksummed)."""
    return {"steps": steps, "accuracy": accuracy, "history": history, "in_band": band[0] <= accuracy <= band[1]}


@dataclass
class BandStop:
    """Stop at the first evaluation at or above the band's low end, every `eval_every` steps up to
    `max_steps`; one that jumps over the band keeps the previous evaluation's weights where those were
    nearer the band; WarmStartError where no evaluation reached it."""

    params: WarmStartParams
    previous: tuple[float, dict[str, torch.Tensor]] | None = None  # the last evaluation's accuracy, weights

    @property
    def last_step(self) -> int:
        return self.params.max_steps

    def evaluates(self, step: int) -> bool:
        return step % self.params.eval_every == 0

    def distance(self, accuracy: float) -> float:
        low, high = self.params.band
        return 0.0 if low <= accuracy <= high else min(abs(accuracy - low), abs(accuracy - high))

    def stop(self, model: torch.nn.Module, step: int, accuracy: float,
             history: list[tuple[int, float]]) -> dict[str, Any] | None:
        if accuracy >= self.params.band[0]:
            if (accuracy > self.params.band[1] and self.previous is not None
                    and self.distance(self.previous[0]) < self.distance(accuracy)):
                model.load_state_dict(self.previous[1])
                accuracy = self.previous[0]
            return _result(step, accuracy, history, self.params.band)
        self.previous = (accuracy, {k: v.detach().clone() for k, v in model.state_dict().items()})
        return None

    def exhausted(self, history: list[tuple[int, float]]) -> dict[str, Any]:
        raise WarmStartError(
            f"warm start did not reach test accuracy {self.params.band[0]:.2f} in {self.params.max_steps} steps "
            f"(history: {history[-5:]}); raise warm_start.max_steps or lr, or make the task easier"
        )


@dataclass
class FixedSteps:
    """Exactly `params.steps` steps, evaluated every `eval_every` and at the end; no stop on the band."""

    params: WarmStartParams
    steps: int

    @property
    def last_step(self) -> int:
        return self.steps

    def evaluates(self, step: int) -> bool:
        return step % self.params.eval_every == 0 or step == self.last_step

    def stop(self, model: torch.nn.Module, step: int, accuracy: float,
             history: list[tuple[int, float]]) -> dict[str, Any] | None:
        return None

    def exhausted(self, history: list[tuple[int, float]]) -> dict[str, Any]:
        return _result(self.last_step, history[-1][1], history, self.params.band)


def sft_optimizer(model: torch.nn.Module, params: WarmStartParams, device: torch.device) -> torch.optim.Optimizer:
    """AdamW, fused as the RL updates' (train.optim): its square root is exact, the unfused one's is
    MKL's vector math, which differs between CPUs (objectives.inputs.ieee_sqrt)."""
    return torch.optim.AdamW(model.parameters(), lr=params.lr, weight_decay=0.0, fused=device.type in ("cpu", "cuda"))


def sft_step(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, task: Task, params: WarmStartParams,
             rng: random.Random, optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """One supervised step on `params.batch_size` fresh training examples (answers and </s> only)."""
    model.train()
    ids, mask, target_mask = sft_batch(tokenizer, [task.train_example(rng) for _ in range(params.batch_size)],
                                       params.prompt_format)
    ids, mask, target_mask = ids.to(device), mask.to(device), target_mask.to(device)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask)).logits[:, :-1]
    loss = torch.nn.functional.cross_entropy(logits[target_mask].float(), ids[:, 1:][target_mask])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


def warm_start(build_model: Callable[[], torch.nn.Module], tokenizer: PreTrainedTokenizerBase, task: Task,
               params: WarmStartParams, key_parts: dict[str, Any], cache_dir: Path,
               on_eval: Callable[[int, float], None] | None = None,
               shipped: Path | bool = True) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Warm-started `(model, info)`, loaded from `cache_dir/<key>` when its files match their
    checksums, or, where the cache holds none, from the entry of that key shipped with the package
    (`shipped`: True for SHIPPED, read when called, False for none, or a folder of entries; installed into
    the cache once its files match their checksums: `info["shipped"]`), or
    trained and saved there atomically. A damaged entry (a file cut short or gone, warmstart.json or
    the checksums missing) is removed and rebuilt; `info["rebuilt"]` says why, and
    `info["shipped_damaged"]` why a shipped entry was not used."""
    from transformers import AutoModelForCausalLM

    # the device only where it is not the CPU: the key (and the cache) of before it existed
    settings = {k: v for k, v in params.__dict__.items() if not (k == "device" and v == "cpu")
                and not (k == "steps" and v is None)}
    # the CPU kernels too: other kernels make other float sums, so other weights (runtime.kernels)
    kernels = kernel_key() if params.device == "cpu" else None
    key = cache_key({**key_parts, "warm_start": settings, **({"kernels": kernels} if kernels else {})})
    target = Path(cache_dir) / f"warmstart-{key}"
    problem = cache_damage(target)
    entries = SHIPPED if shipped is True else None if shipped is False else shipped
    found = shipped_entry(target.name, entries) if not target.exists() or problem is not None else None
    if isinstance(found, Path):
        if problem is not None:
            _discard(target)
        install_entry(found, target)
        problem = None
    if target.exists() and problem is None:
        info = json.loads((target / "warmstart.json").read_text())
        model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(target, local_files_only=True, dtype=torch.float32)
        return model, {**info, "cached": True, "path": str(target), **({"shipped": True} if isinstance(found, Path) else {})}
    if problem is not None:
        _discard(target)
    model = build_model()
    info = finetune(model, tokenizer, task, params, on_eval=on_eval)
    info["key"], info["kernels"] = key, kernels
    save_entry(model, tokenizer, info, target)
    return model, {**info, "cached": False, "path": str(target), **({"rebuilt": problem} if problem else {}),
                   **({"shipped_damaged": found} if isinstance(found, str) else {})}


def shipped_entry(name: str, shipped: Path | None = SHIPPED) -> Path | str | None:
    """The warm start `name` (`warmstart-<key>`) shipped with the package under `shipped`: its folder where
    every file matches its checksum, one line saying why not where it does not (it is then not used), None
    where none ships."""
    folder = None if shipped is None else Path(shipped) / name
    if folder is None or not folder.is_dir():
        return None
    problem = cache_damage(folder)
    return folder if problem is None else f"the shipped warm start {folder} is damaged: {problem}"


def install_entry(source: Path, target: Path) -> None:
    """Copy the entry `source` to `target` in the cache, aside first and renamed into place (another
    process's finished copy is kept)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        shutil.copytree(source, tmp / "entry")
        share(tmp / "entry")
        try:
            (tmp / "entry").rename(target)
        except OSError:  # another process installed it first
            if cache_damage(target) is not None:
                raise WarmStartError(f"another process wrote a damaged warm start to {target}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cache_damage(target: Path) -> str | None:
    """Why the cache entry `target` cannot be used (None: absent, or every file as written)."""
    if not target.exists():
        return None
    if not (target / "warmstart.json").is_file():
        return f"{target / 'warmstart.json'} is missing"
    return damage(target)


def _discard(target: Path) -> None:
    """Move a damaged entry aside, then delete it (a rename is atomic: no process sees it half gone)."""
    trash = Path(tempfile.mkdtemp(prefix=f".{target.name}-damaged-", dir=target.parent))
    try:
        target.rename(trash / "entry")
    except FileNotFoundError:  # another process discarded it first
        pass
    shutil.rmtree(trash, ignore_errors=True)


def save_entry(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, info: dict[str, Any], target: Path) -> None:
    """Write the entry aside with its checksums and rename it into place; if another process put a
    good one there first, theirs is kept."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        hf_model(model, "a warm-start entry").save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "warmstart.json").write_text(json.dumps(info, indent=1))
        write_checksums(tmp)
        share(tmp)  # mkdtemp's folder is private (0700): the cache may be shared
        try:
            tmp.rename(target)
            return
        except OSError:  # another process finished the same warm start first
            problem = cache_damage(target)
            if problem is not None:
                raise WarmStartError(f"another process wrote a damaged warm start to {target} ({problem})") from None
        shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
