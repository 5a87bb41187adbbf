"""How far past its tolerance `gspo-bench regress` puts each planted bug (experiments/planted_bugs.py,
asserted by tests/test_regress.py).

Runs the tests' baseline (GRPO, GRPO + RR and GSPO on the tests' tiny MoE, seeds 0 and 1, 6 steps),
then seed 0 again unchanged and with each bug planted (GSPO's loss without 1/|y_i|, GRPO's loss sign
flipped, GRPO's loss over all tokens, routing replay dropped from the update forwards), and prints
what `regress` says of each: its regressions with their excess (x its tolerance) and the closest pass.

    python experiments/regress_margins.py          (about 2 minutes on 2 cores)
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import yaml

from gspo_bench.runtime.kernels import pin_kernels

pin_kernels()  # as the command line does, before anything computes

from analysis.checks.regress import compare, excess_text, load_tolerances  # noqa: E402
from analysis.data.load import load_results  # noqa: E402
from gspo_bench.config import parse_suite  # noqa: E402
from gspo_bench.objectives import registry  # noqa: E402
from gspo_bench.suite.runner import plan_runs, starting_weights  # noqa: E402
from gspo_bench.train import update as update_module  # noqa: E402
from gspo_bench.train.loop import RunSpec, train_run  # noqa: E402

HERE = Path(__file__).resolve().parent
TOLERANCES = HERE / "regress_tolerances.yaml"


def load_planted():
    """experiments/planted_bugs.py (beside this script; experiments/ is no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("planted_bugs", HERE / "planted_bugs.py")
    assert spec is not None and spec.loader is not None, "experiments/planted_bugs.py is missing"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


planted = load_planted()
BUGS = [("GSPO's loss without 1/|y_i| (metrics right)", "gspo", planted.gspo_summing_in_the_loss),
        ("GRPO's loss sign flipped", "grpo", planted.grpo_with_its_sign_flipped),
        ("GRPO's loss over all tokens (wrong normaliser)", "grpo", planted.grpo_over_all_tokens)]


def suite_data(cache: Path) -> dict:
    """The tests' baseline suite (tests/helpers/runs.py: signal_suite, 6 steps): GRPO, GRPO + RR and GSPO
    on the tiny MoE, seeds 0 and 1."""
    return {"name": "tiny",
            "model": {"num_layers": 2, "hidden_size": 32, "expert_hidden": 32, "num_experts": 4, "top_k": 2},
            "task": {"name": "sort", "params": {"max_len": 3}},
            "warm_start": {"cache_dir": str(cache), "band": [0.4, 0.9], "eval_every": 20, "eval_examples": 32},
            "rollout": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 8},
            "train": {"lr": 1e-3, "minibatches": 2, "threads": 1},
            "budget": {"kind": "steps", "value": 6},
            "objectives": [{"name": "grpo"}, {"name": "grpo_rr"}, {"name": "gspo"}], "seeds": [0, 1]}


def run_suite(data: dict, out: Path) -> None:
    """Every run of `data` into `out`, one after another, each from the first seed's starting weights
    (as the tests run their baseline)."""
    suite = parse_suite(data)
    for planned in plan_runs(suite, out):
        weights = starting_weights(planned.suite, suite.seeds[0], log=lambda m: None)
        train_run(RunSpec(suite=planned.suite, entry=planned.entry, seed=planned.seed, run_dir=planned.run_dir,
                          init_weights=weights, sweep=planned.sweep, arm=planned.arm), resume=False)


def regress(root: Path, name: str, tolerances: Path) -> str:
    """What `gspo-bench regress` concludes of run folder `name` against the baseline: its regressions,
    each with its excess, and the closest pass."""
    checks = compare(load_results(root / name / "tiny"), load_results(root / "baseline" / "tiny"),
                     load_tolerances(tolerances))
    failed = [c for c in checks if not c.ok]
    margins = [c.excess for c in checks if c.ok and c.excess is not None]
    lines = [f"closest pass: {excess_text(max(margins))} of its tolerance"] if margins else []
    if failed:
        lines.append(f"{len(failed)} regression(s): " + ", ".join(
            f"{c.label} {c.metric}" + ("" if c.excess is None else f" ({excess_text(c.excess)} x its tolerance)")
            for c in failed))
    else:
        lines.append(f"no regression ({len(checks)} checks)")
    return "\n  ".join(lines)


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="regress-margins-"))
    data = suite_data(root / "cache")
    run_suite(data, root / "baseline")
    data = data | {"seeds": [0]}
    tolerances = root / "tolerances.yaml"  # CI's, without the reward-rises invariant (6 steps learn little)
    tolerances.write_text(yaml.safe_dump(yaml.safe_load(TOLERANCES.read_text()) | {"min_reward_rise": -1.0}))
    run_suite(data, root / "unchanged")
    print(f"unchanged:\n  {regress(root, 'unchanged', tolerances)}")
    for i, (bug, objective, fn) in enumerate(BUGS):
        spec = registry.objective_spec(objective)
        registry._REGISTRY[objective] = dataclasses.replace(spec, fn=fn)
        try:
            run_suite(data, root / f"bug{i}")
        finally:
            registry._REGISTRY[objective] = spec
        print(f"{bug}:\n  {regress(root, f'bug{i}', tolerances)}")
    plain = update_module.capturing
    update_module.capturing = lambda *a, replay=None, **k: plain(*a, replay=None, **k)
    try:
        run_suite(data, root / "replay_off")
    finally:
        update_module.capturing = plain
    print(f"routing replay dropped from the update forwards:\n  {regress(root, 'replay_off', tolerances)}")


if __name__ == "__main__":
    main()
