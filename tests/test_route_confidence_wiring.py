"""pi_old's routing confidence (`moe/route_conf`, gspo_bench.train.old_policy) is the mean over attended
tokens only: widening every row's left padding leaves it as it was (a review's break averaged over the
padding too, and no test saw it)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch

from gspo_bench.train.old_policy import old_policy_pass
from gspo_bench.train.policy import Policy

sys.path.insert(0, str(Path(__file__).parent))
from test_micro_batches import setting  # noqa: E402, F401


def widened(batch, columns: int):
    """`batch` with `columns` more padding columns on the left of every row."""
    pad = lambda t: torch.cat([t.new_zeros(t.shape[0], columns), t], dim=1)  # noqa: E731
    return dataclasses.replace(batch, input_ids=pad(batch.input_ids), attention_mask=pad(batch.attention_mask))


def test_route_confidence_is_over_attended_tokens_only(setting):  # noqa: F811
    model, batch, _ = setting
    policy = Policy(model.eval())
    plain = old_policy_pass(policy, batch, temperature=0.8)
    wide = old_policy_pass(policy, widened(batch, 7), temperature=0.8)
    assert torch.isfinite(plain.metrics["moe/route_conf"])
    torch.testing.assert_close(wide.route_conf, plain.route_conf, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(wide.metrics["moe/route_conf"], plain.metrics["moe/route_conf"], rtol=1e-5, atol=1e-6)
