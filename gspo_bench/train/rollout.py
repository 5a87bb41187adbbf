"""Phase 1 of a step: sample G responses for P prompts, score them, group advantages."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch

from gspo_bench.models.chat import PromptFormat
from gspo_bench.objectives import group_advantages
from gspo_bench.rollout import Rollout, RolloutEngine, SamplingParams
from gspo_bench.rollout.batching import gather_rollout
from gspo_bench.tasks import Example, Task
from gspo_bench.train.credit import step_advantages
from gspo_bench.train.policy import Policy

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class RolloutBatch:
    """B = P x G scored responses (rows of a group consecutive), on the training device."""

    input_ids: torch.Tensor  # [B, L] left-padded prompt, then response
    attention_mask: torch.Tensor  # [B, L]
    response_mask: torch.Tensor  # [B, T] bool, valid response tokens
    sampling_logp: torch.Tensor  # [B, T] the engine's log-probs of the sampled tokens
    routing: torch.Tensor | None  # [L_moe, B, L, k] the engine's experts (for R3 and the routing gap), or None
    rewards: torch.Tensor  # [B] fp32, on the host (computed from decoded text)
    advantages: torch.Tensor  # [B] group advantages A_i, on the training device
    finite: torch.Tensor  # 0-d bool: the engine's sampling distributions were finite
    token_advantages: torch.Tensor | None = None  # [B, T] step-level credit A_it (see train.credit), or None
    lagged_routing: torch.Tensor | None = None  # [L_moe, B, L, k] the learner's experts replay_lag updates before
    #                                             the step that trains on it (lagged R2: train.lag), or None
    sampling_kept: torch.Tensor | None = None  # [B, T, K] each response token's kept set under truncated
    #                                            sampling (-1 padded; train.sampling_mask), or None

    def kept(self, rows: torch.Tensor | slice = slice(None), n_response: int | None = None) -> torch.Tensor | None:
        """The kept sets of `rows`, their first `n_response` positions (all by default), for a training forward
        that renormalises over them; None where the engine recorded none."""
        if self.sampling_kept is None:
            return None
        return self.sampling_kept[rows][:, : self.n_response if n_response is None else n_response]

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @property
    def n_response(self) -> int:
        return self.response_mask.shape[1]

    @classmethod
    def scored(cls, rollout: Rollout, rewards: torch.Tensor, group_size: int,
               advantage_scale: Literal["std", "none"] = "std",
               device: torch.device | str = "cpu") -> RolloutBatch:
        """A batch from an engine's rollout and its rewards [B]: group advantages (eq. 3)."""
        routing = None
        if rollout.routing is not None:
            routing = routing_for_training(rollout.routing, rollout.input_ids.shape[1]).to(device)
        finite = rollout.finite if rollout.finite is not None else torch.tensor(True)
        return cls(
            input_ids=rollout.input_ids.to(device), attention_mask=rollout.attention_mask.to(device),
            response_mask=rollout.response_mask.to(device), sampling_logp=rollout.sampling_logp.to(device),
            routing=routing, rewards=rewards.float(), finite=finite.to(device),
            advantages=group_advantages(rewards, group_size, scale=advantage_scale).to(device),
            sampling_kept=rollout.sampling_kept.to(device) if rollout.sampling_kept is not None else None,
        )


def draw_examples(task: Task, n: int, seed: int) -> list[Example]:
    """The step's n training problems, drawn from a generator seeded for this step alone."""
    rng = random.Random(seed)
    return [task.train_example(rng) for _ in range(n)]


def collect_rollout(policy: Policy, engine: RolloutEngine, tokenizer: PreTrainedTokenizerBase, task: Task,
                    examples: list[Example], params: SamplingParams, advantage_scale: Literal["std", "none"] = "std", step_penalty: float | None = None,
                    prompt_format: PromptFormat = PromptFormat()) -> RolloutBatch:
    """Sample G responses per example from the policy's current weights (in the rollout precision:
    the training one unless rollout.dtype differs), decode and score them with the task's verifier.
    Prompts are rendered by `prompt_format` (raw, or with the chat template)."""
    engine.sync_weights(policy.model)
    with (policy.rollout_precision or policy.precision).autocast():
        rollout = generate(policy, engine, [prompt_format.encode(tokenizer, ex.prompt) for ex in examples], params)
    texts = tokenizer.batch_decode(rollout.response_ids, skip_special_tokens=True)  # the one host copy of tokens
    group = params.group_size
    rows = [examples[i // group] for i in range(len(texts))]
    rewards = torch.tensor([task.reward(text, example) for text, example in zip(texts, rows, strict=True)])
    batch = RolloutBatch.scored(rollout, rewards, group, advantage_scale, device=policy.device)
    if step_penalty is None:
        return batch
    steps = getattr(task, "steps", None)  # (an optional part of a task)
    if steps is None:
        raise ValueError(f"step credit needs a task that checks steps; {task.name} does not")
    credit = step_advantages(batch.advantages, rollout.response_ids, rollout.response_mask, texts, rows, steps,
                             tokenizer, step_penalty)
    return dataclasses.replace(batch, token_advantages=credit)


def generate(policy: Policy, engine: RolloutEngine, prompts: list[list[int]], params: SamplingParams) -> Rollout:
    """G responses to each prompt. Under torchrun each rank generates rows r, r + W, ... of the batch
    (each row sampling with its own key, its global index) and the ranks exchange them, so the
    rollout equals one process's whatever the world size."""
    world = policy.world
    if not world.distributed:
        return engine.generate(policy.model, prompts, params)
    rows = [p for p in prompts for _ in range(params.group_size)]
    mine = list(range(world.rank, len(rows), world.size))
    local = engine.generate(policy.model, [rows[i] for i in mine],
                            dataclasses.replace(params, group_size=1, row_keys=tuple(mine)))
    pad_id = getattr(engine, "pad_id", None)  # (the hf engine's; the protocol does not require it)
    if pad_id is None:
        raise ValueError(f"the {engine.name} engine names no pad id: it cannot generate under torchrun")
    return gather_rollout(world, local, len(rows), pad_id)


def routing_for_training(routing: torch.Tensor, length: int) -> torch.Tensor:
    """Rollout routing [L, B, L_seq - 1, k] extended to the training forward's L_seq positions.

    Generation never routes its last sampled token (nothing is sampled after it); that position
    only predicts beyond the response, so no log-prob depends on it: it gets the experts of the
    position before it.
    """
    missing = length - routing.shape[2]
    if missing < 0 or routing.shape[2] == 0:
        raise ValueError(f"rollout routing covers {routing.shape[2]} positions, the batch has {length}")
    if missing == 0:
        return routing
    return torch.cat([routing, routing[:, :, -1:].expand(-1, -1, missing, -1)], dim=2)
