"""What the phases of a step act on: the trained model with its optimizer, precision and world."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

from gspo_bench.moe import RoutingCapture
from gspo_bench.runtime.distributed import World
from gspo_bench.train.precision import Precision


@dataclass
class Policy:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer | None = None  # None: the policy is only evaluated
    precision: Precision = Precision()  # of every training forward (old pass, updates)
    world: World = World()  # one process, or this rank of a torchrun job (FSDP2)
    reference: torch.nn.Module | None = None  # frozen starting weights, for a KL-to-reference penalty
    rollout_precision: Precision | None = None  # of generation (rollout.dtype); None: `precision`

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def trainer(self) -> torch.optim.Optimizer:
        """The optimizer of a policy that trains; RuntimeError for one built only to be evaluated."""
        if self.optimizer is None:
            raise RuntimeError("this policy has no optimizer (built for evaluation only): it cannot be updated")
        return self.optimizer


def checkpoint_activations(model: torch.nn.Module) -> int:
    """Checkpoint every decoder layer of `model` (`train.activation_checkpointing`), each recompute
    routing as the forward it recomputes (the replayed experts under R2/R3, the recorded ones
    otherwise: `moe.recompute`); returns how many layers."""
    from gspo_bench.models.checkpointing import checkpoint_layers
    from gspo_bench.moe.recompute import RouteKeeper

    return checkpoint_layers(model, RouteKeeper(model))


def capturing(model: torch.nn.Module, enabled: bool, replay: torch.Tensor | None = None,
              probe: torch.Tensor | None = None, margins: bool = False,
              pairs: torch.Tensor | None = None, confidence: bool = False,
              replay_weights: torch.Tensor | None = None) -> AbstractContextManager[RoutingCapture | None]:
    """A RoutingCapture (recording, replaying `replay` (with `replay_weights`: full replay, the recorded
    combine weights too), reading the live gate scores of the experts in `probe`, the router margins or
    the logits at `pairs`: `moe.margins`, the routing confidence: `moe.confidence`), or a block yielding
    None when not `enabled` and there is nothing to replay or probe."""
    if enabled or replay is not None or probe is not None:
        return RoutingCapture(model, replay=replay, replay_weights=replay_weights, probe=probe,
                              margins=margins and enabled, pairs=pairs, confidence=confidence and enabled)
    return nullcontext()


def captured(capture: RoutingCapture | None) -> RoutingCapture:
    """The capture `capturing` yielded; RuntimeError where it yielded none (nothing was enabled to record)."""
    if capture is None:
        raise RuntimeError("no routing capture ran in this forward: capturing(...) was not enabled")
    return capture
