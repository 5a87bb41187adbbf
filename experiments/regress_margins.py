"""How far past its tolerance `gspo-bench regress` puts each planted bug of tests/test_regress.py.

Runs the tests' baseline (GRPO, GRPO + RR and GSPO on the tests' tiny MoE, seeds 0 and 1, 6 steps),
then seed 0 again unchanged and with each bug planted (GSPO's loss without 1/|y_i|, GRPO's loss sign
flipped, GRPO's loss over all tokens, routing replay dropped from the update forwards), and prints
what `regress` says of each: its regressions with their excess (x its tolerance) and the closest pass.

    python experiments/regress_margins.py          (about 2 minutes on 2 cores)
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path

import yaml

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from gspo_bench.runtime.kernels import pin_kernels  # noqa: E402

pin_kernels()  # as the command line does, before anything computes

import test_regress as planted  # noqa: E402
from test_harness import run_suite, signal_suite  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from gspo_bench import cli as cli_module  # noqa: E402
from gspo_bench.objectives import registry  # noqa: E402
from gspo_bench.train import update as update_module  # noqa: E402

BUGS = [("GSPO's loss without 1/|y_i| (metrics right)", "gspo", planted.gspo_summing_in_the_loss),
        ("GRPO's loss sign flipped", "grpo", planted.grpo_with_its_sign_flipped),
        ("GRPO's loss over all tokens (wrong normaliser)", "grpo", planted.grpo_over_all_tokens)]


def regress(root: Path, name: str, tolerances: Path) -> str:
    result = CliRunner().invoke(cli_module.app, ["regress", str(root / name / "tiny"), "--baseline",
                                                 str(root / "baseline" / "tiny"), "--tolerances", str(tolerances)])
    return "\n  ".join(line for line in result.output.splitlines()
                       if "regression(s)" in line or "closest pass" in line or "no regression" in line)


def main() -> None:
    cli_module.console.width = 10_000  # one line per message
    root = Path(tempfile.mkdtemp(prefix="regress-margins-"))
    data = signal_suite(root / "cache", steps=6, objectives=[{"name": "grpo"}, {"name": "grpo_rr"}, {"name": "gspo"}],
                        seeds=[0, 1])
    run_suite(data, root / "baseline")
    data = data | {"seeds": [0]}
    tolerances = root / "tolerances.yaml"  # CI's, without the reward-rises invariant (6 steps learn little)
    tolerances.write_text(yaml.safe_dump(yaml.safe_load(planted.TOLERANCES.read_text()) | {"min_reward_rise": -1.0}))
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
