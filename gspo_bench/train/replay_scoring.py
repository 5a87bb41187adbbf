"""Paired replay scoring (`train.replay_scoring`): one sampled batch scored three ways by the policy that
will be updated, before any update, and each scoring's engine-vs-trainer KL logged, so a run shows how
much of the training-inference mismatch each routing replay would remove.

- `replay_score/k3_live`: the trainer's own routing (what a run without replay computes);
- `replay_score/k3_r2`: the old-policy pass's routing replayed (Routing Replay, R2). Before any update the
  old pass *is* the live policy, so this equals the live scoring: R2 cannot remove an engine mismatch,
  only the drift the updates add;
- `replay_score/k3_r3`: the engine's routing replayed (R3). Where the engine's mismatch is router noise
  alone (its expert choice), replaying its choice removes it: 0 up to float rounding.

Each is `mismatch/k3_kl`'s estimator (gspo_bench.rollout.mismatch): mean k3 over response tokens of
log pi_train - log pi_engine. Three extra no-grad forwards a step; off by default.
"""

from __future__ import annotations

import torch

from gspo_bench.models.forward import response_forward
from gspo_bench.rollout.mismatch import logprob_mismatch
from gspo_bench.runtime.distributed import gather_rows
from gspo_bench.train.policy import Policy, captured, capturing
from gspo_bench.train.rollout import RolloutBatch

LIVE, R2, R3 = "replay_score/k3_live", "replay_score/k3_r2", "replay_score/k3_r3"
REPLAY_SCORE_COLUMNS = (LIVE, R2, R3)
SCORING_PASSES = 3  # no-grad forwards over the batch a step (compute/tokens_forward counts them)


def scored(policy: Policy, batch: RolloutBatch, forced: torch.Tensor | None, *, temperature: float,
           head_chunk: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """([B, T] log-probs of the batch's responses, [L_moe, B, L, k] the experts used) under `forced`
    routing replayed ([L_moe, B, L, k] over every row), or the model's own where None."""
    world, model = policy.world, policy.model
    rows = torch.arange(len(batch), device=batch.input_ids.device)
    mine = world.rows(rows)
    with torch.no_grad(), policy.precision.autocast(), \
            capturing(model, True, replay=None if forced is None else forced[:, mine]) as capture:
        logp, _ = response_forward(model, batch.input_ids[mine], batch.attention_mask[mine], batch.n_response,
                                   temperature, head_chunk=head_chunk, kept=batch.kept(mine))  # [B, T]
    return gather_rows(world, logp, rows), gather_rows(world, captured(capture).routing, rows, dim=1)


def replay_scores(policy: Policy, batch: RolloutBatch, *, temperature: float,
                  head_chunk: int | None = None) -> dict[str, torch.Tensor]:
    """The engine-vs-trainer k3 of the batch under the live, R2 and R3 routings (0-d tensors, on the
    device). ValueError where the rollout recorded no engine routing (R3 has nothing to replay)."""
    if batch.routing is None:
        raise ValueError("train.replay_scoring: the rollout engine recorded no routing, so R3's scoring has "
                         "nothing to replay; use an engine that records it (hf) or turn replay_scoring off")
    live_logp, live_routing = scored(policy, batch, None, temperature=temperature, head_chunk=head_chunk)
    r2_logp, _ = scored(policy, batch, live_routing, temperature=temperature, head_chunk=head_chunk)
    r3_logp, _ = scored(policy, batch, batch.routing, temperature=temperature, head_chunk=head_chunk)
    return {name: logprob_mismatch(logp, batch.sampling_logp, batch.response_mask)["mismatch/k3_kl"]
            for name, logp in ((LIVE, live_logp), (R2, r2_logp), (R3, r3_logp))}


def step_replay_scores(policy: Policy, batch: RolloutBatch, enabled: bool, *, temperature: float,
                       head_chunk: int | None = None) -> dict[str, torch.Tensor]:
    """The step's replay scores where `train.replay_scoring` is on (before the step's updates), else {}."""
    return replay_scores(policy, batch, temperature=temperature, head_chunk=head_chunk) if enabled else {}
