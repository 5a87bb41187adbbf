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
import runpy
import tempfile
from pathlib import Path

import yaml

from gspo_bench.runtime.kernels import pin_kernels

pin_kernels()  # as the command line does, before anything computes

from analysis.checks.regress import compare, excess_text, load_tolerances  # noqa: E402
from analysis.data.load import load_results  # noqa: E402
from gspo_bench.objectives import registry  # noqa: E402
from gspo_bench.train import update as update_module  # noqa: E402

HERE = Path(__file__).resolve().parent
TOLERANCES = HERE / "regress_tolerances.yaml"
# beside this script (experiments/ is no package): the planted bugs, and the tests' suites with the runs
# one after another, each from the first seed's starting weights, as the tests run their baseline
planted = runpy.run_path(str(HERE / "planted_bugs.py"))
suites = runpy.run_path(str(HERE / "tiny_suites.py"))
BUGS = [("GSPO's loss without 1/|y_i| (metrics right)", "gspo", planted["gspo_summing_in_the_loss"]),
        ("GRPO's loss sign flipped", "grpo", planted["grpo_with_its_sign_flipped"]),
        ("GRPO's loss over all tokens (wrong normaliser)", "grpo", planted["grpo_over_all_tokens"])]
run_suite = suites["run_suite"]


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
    data = suites["baseline_suite"](root / "cache")  # the tests' baseline (tests/test_regress.py)
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
