"""One clip measure for every family: each token's gradient against the plain policy gradient's under the
same reduction (`clip/grad_weak_frac`, `clip/grad_weight_mean`), on hand batches, through `policy_loss`."""

from __future__ import annotations

import math

import pytest
import torch

from gspo_bench.objectives import get_objective
from gspo_bench.objectives.metrics import gradient_weight_metrics
from gspo_bench.objectives.reduce import recording_token_weights
from gspo_bench.train.measurements import StepMeasurements
from gspo_bench.train.old_policy import OldPolicy
from gspo_bench.train.rollout import RolloutBatch
from gspo_bench.train.update import UpdateSettings, policy_loss

OLD = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, -3.0], [-0.4, -0.9, -1.2]])
MASK = torch.tensor([[True, True, True], [True, True, False], [True, True, True]])


def measured(name, log_ratios, advantages, mask=MASK, sampling_logp=None):
    """`policy_loss` of objective `name` on a hand batch whose pi_old is OLD."""
    logp = (OLD + torch.tensor(log_ratios)).requires_grad_(True)
    b, t = mask.shape
    batch = RolloutBatch(input_ids=torch.zeros(b, t + 2, dtype=torch.long), attention_mask=torch.ones(b, t + 2),
                         response_mask=mask, sampling_logp=OLD if sampling_logp is None else sampling_logp,
                         routing=None, rewards=torch.zeros(b), advantages=torch.tensor(advantages), finite=torch.tensor(True))
    old = OldPolicy(logp=OLD, entropy=torch.zeros(b, t), entropy_mean=torch.zeros(()), routing=None, replay=None)
    settings = UpdateSettings(inputs=frozenset({"sampling_logp"}) if sampling_logp is not None else frozenset())
    loss, metrics = policy_loss(get_objective(name), logp, old, batch, torch.arange(b), settings)
    return loss, logp, {k: float(v) for k, v in metrics.items()}


def test_grpo_tokens_weigh_their_ratio_and_a_clipped_one_nothing():
    """GRPO (clip 0.2 / 0.27), A = (+1, -1, 0). Row 0: r = 1.1, 0.5 (A > 0, below 0.8: kept, weight 0.5), 1.5
    (cut above 1.27: 0). Row 1: r = 0.7 (A < 0, below 0.8: cut, 0), 1.3 (kept, 1.3). Row 2 has no advantage
    and is left out. Weights (1.1, 0.5, 0, 0, 1.3) over 5 tokens: mean 2.9 / 5; under one half: 0.5 is not
    (strictly), 0 and 0 are: 2 / 5."""
    lr = [[math.log(1.1), math.log(0.5), math.log(1.5)], [math.log(0.7), math.log(1.3), 0.0], [0.3, -0.2, 0.1]]
    _, _, m = measured("grpo", lr, [1.0, -1.0, 0.0])
    assert m["count/grad_tokens"] == 5
    assert m["clip/grad_weight_mean"] == pytest.approx(2.9 / 5, rel=1e-6)
    assert m["clip/grad_weak_frac"] == pytest.approx(2 / 5)
    assert m["clip/frac"] == pytest.approx(2 / 8)  # the hard-clip share beside it counts every valid token


def test_the_weight_is_independent_of_the_reduction_and_one_on_policy():
    """On policy (r = 1) every objective's policy-gradient term passes the plain gradient: weight 1 whatever
    its reduction (GRPO's per-response mean, DAPO's token mean, Dr. GRPO's fixed normaliser)."""
    zero = [[0.0] * 3] * 3
    for name in ("grpo", "dapo", "dr_grpo", "gspo", "cispo"):
        _, _, m = measured(name, zero, [1.0, -2.0, 0.5])
        assert m["clip/grad_weight_mean"] == pytest.approx(1.0, rel=1e-6), name
        assert m["clip/grad_weak_frac"] == 0.0, name


def test_sapo_soft_gate_counts_as_cut_where_it_passes_less_than_half():
    """SAPO: the gradient weight is the gate's derivative times the ratio, 4 sigma(tau (r - 1)) (1 - sigma) r;
    at r = e^1.5 (A > 0, tau 1) it is 4 s (1 - s) r with s = sigma(e^1.5 - 1)."""
    lr = [[1.5, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    _, _, m = measured("sapo", lr, [1.0, 0.0, 0.0])
    r = math.exp(1.5)
    s = 1 / (1 + math.exp(-(r - 1)))
    expected = (4 * s * (1 - s) * r + 1 + 1) / 3
    assert m["clip/grad_weight_mean"] == pytest.approx(expected, rel=1e-5)
    assert m["clip/grad_weak_frac"] == pytest.approx(1 / 3 if 4 * s * (1 - s) * r < 0.5 else 0.0)


def test_a_masked_ipo_token_passes_only_its_penalty():
    """prime-rl's IPO masks a token moved more than 0.1 in probability from mu: its weight is then only the
    penalty's, -2 kl_tau log r / A (kl_tau 1e-3), far under one half."""
    mu = OLD.clone()
    lr = [[math.log(1.5), 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]  # pi = 1.5 mu on token (0, 0): |pi - mu| = .18
    _, _, m = measured("ipo", lr, [1.0, 0.0, 0.0], sampling_logp=mu)
    assert m["count/grad_tokens"] == 3
    masked = -2e-3 * math.log(1.5)
    assert m["clip/grad_weight_mean"] == pytest.approx((masked + 1 + 1) / 3, rel=1e-5)
    assert m["clip/grad_weak_frac"] == pytest.approx(1 / 3)


def test_gradient_weight_metrics_by_hand_and_per_token_advantages():
    """Direct: c = 1/4 on each of 4 tokens, per-token advantages (2, -1, 0 | 1), gradient -(2 c 0.25, -c 2,
    0, c 1): weights 0.25, 2, (A = 0: left out), 1."""
    c = torch.full((2, 2), 0.25)
    adv = torch.tensor([[2.0, -1.0], [0.0, 1.0]])
    grad = -torch.tensor([[2 * 0.25 * 0.25, -1 * 0.25 * 2], [0.7, 1 * 0.25]])
    m = gradient_weight_metrics(grad, c, adv, torch.ones(2, 2, dtype=torch.bool))
    assert float(m["count/grad_tokens"]) == 3
    assert float(m["clip/grad_weight_mean"]) == pytest.approx((0.25 + 2 + 1) / 3)
    assert float(m["clip/grad_weak_frac"]) == pytest.approx(1 / 3)


def test_the_reduction_hands_over_its_weight_of_each_token():
    """GRPO's per-response mean over 2 non-empty responses of 3 and 2 tokens: 1/6 and 1/4 per token, 0 at
    padding and on the empty row."""
    mask = torch.tensor([[True, True, True], [True, True, False], [False, False, False]])
    with recording_token_weights() as weights:
        get_objective("grpo")(logp=OLD, old_logp=OLD, advantages=torch.ones(3), mask=mask)
    expected = torch.tensor([[1 / 6] * 3, [0.25, 0.25, 0.0], [0.0] * 3])
    torch.testing.assert_close(weights[0], expected)


def test_minibatches_weigh_the_gradient_weights_by_their_tokens_with_advantage():
    """Two minibatches: weight mean 0.5 over 3 tokens with advantage (of 8 tokens), 1.0 over 1 (of 8):
    (1.5 + 1) / 4, not the token-weighted 0.75."""
    steps = StepMeasurements()
    keep = torch.tensor(True)
    for mean, n in ((0.5, 3.0), (1.0, 1.0)):
        steps.add({"clip/grad_weight_mean": torch.tensor(mean), "count/grad_tokens": torch.tensor(n)},
                  n_tokens=torch.tensor(8.0), n_responses=torch.tensor(2.0), kept=keep)
    out = steps.result()
    assert float(out["clip/grad_weight_mean"]) == pytest.approx(2.5 / 4)
    assert float(out["count/grad_tokens"]) == 4


def test_the_measure_leaves_the_update_gradient_unchanged():
    """The measure's own backward reaches the log-probs only: the loss's gradient afterwards is the same."""
    lr = [[0.2, -0.3, 0.5], [0.1, 0.4, 0.0], [-0.2, 0.3, 0.1]]
    loss, logp, _ = measured("grpo", lr, [1.0, -1.0, 0.5])
    (after,) = torch.autograd.grad(loss, logp)
    fresh = (OLD + torch.tensor(lr)).requires_grad_(True)
    plain, _ = get_objective("grpo")(logp=fresh, old_logp=OLD, advantages=torch.tensor([1.0, -1.0, 0.5]), mask=MASK)
    (expected,) = torch.autograd.grad(plain, fresh)
    assert torch.equal(after, expected)


def test_figure_2_draws_the_gradient_weight_share_beside_each_family_clip_fraction():
    """Two objectives, two seeds, two steps: clip/frac means 0.01 and 0.2; clip/grad_weak_frac 0.3 (SAPO-like:
    a soft gate its own clip/frac undercounts) and 0.2. Both figures draw the second bar at the seed mean."""
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from analysis.data.load import Results
    from analysis.figures.curves import clip_fraction
    from analysis.figures.curves_interactive import clip_fraction as clip_fraction_interactive

    rows = []
    for label, frac, weak in (("sapo", 0.01, (0.2, 0.4)), ("grpo", 0.2, (0.2, 0.2))):
        for seed, w in zip((0, 1), weak):
            for step in (1, 2):
                rows.append({"label": label, "objective": label, "seed": seed, "step": step, "clip/frac": frac,
                             "clip/grad_weak_frac": w, "compute/cum_flops": step * 1e9})
    metrics = pd.DataFrame(rows)
    ax = clip_fraction(metrics)
    hatched = [p.get_height() for p in ax.patches if p.get_hatch() == "//"]
    assert hatched == pytest.approx([0.3, 0.2])
    figures = clip_fraction_interactive(Results(metrics=metrics, layers=pd.DataFrame(), runs=pd.DataFrame({"label": ["sapo", "grpo"]}),
                                                evals=pd.DataFrame()))
    weak = {t.name: t.y[0] for t in figures[0].data if t.name and t.name.endswith("gradient < 1/2")}
    assert weak == pytest.approx({"sapo gradient < 1/2": 0.3, "grpo gradient < 1/2": 0.2})
    without = clip_fraction(metrics.drop(columns="clip/grad_weak_frac"))  # older runs: the figure as before
    assert not [p for p in without.patches if p.get_hatch() == "//"]
