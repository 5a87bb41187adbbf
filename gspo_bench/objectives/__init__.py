"""Policy-optimisation objectives as pure, registered tensor functions.

    from gspo_bench.objectives import get_objective, list_objectives, group_advantages
    loss, metrics = get_objective("gspo")(
        logp=logp, old_logp=old_logp, advantages=adv, mask=mask, clip_low=3e-4, clip_high=4e-4)
"""

from gspo_bench.objectives import (  # noqa: F401  (registers)
    cispo,
    cov,
    dapo,
    dppo,
    dr_grpo,
    dro,
    gmpo,
    grpo,
    gspo,
    ipo,
    luspo,
    m2po,
    minpro,
    rspo,
    sapo,
    vcpo,
    vespo,
)
from gspo_bench.objectives.advantages import group_advantages
from gspo_bench.objectives.registry import (
    Metrics,
    ObjectiveFn,
    ObjectiveSpec,
    UnknownObjectiveError,
    get_objective,
    list_objectives,
    objective_spec,
    register_objective,
)

__all__ = [
    "Metrics",
    "ObjectiveFn",
    "ObjectiveSpec",
    "UnknownObjectiveError",
    "get_objective",
    "group_advantages",
    "list_objectives",
    "objective_spec",
    "register_objective",
]
