"""The versions of the stability map's outcome rules, so that a suite is judged by the rules it was run
under. A suite picks its set with `analysis: {rules: v2}`; a suite without the key (every folder written
before the key existed: stages 0-2 of results/stability_cpu) is judged by v1.

- **v1**: the classes of analysis.evidence.stability as first fixed: a sustained drop (SUSTAINED points
  below their thresholds to the end) is a collapse however short the stretch of the run they span.
- **v2**: the same classes, but a sustained drop is a collapse only where its points span at least
  COLLAPSE_SHARE of the run's evaluated steps (from the first point below to the last point, against the
  first point to the last): two evaluations one step apart at the end of a run are a degraded run, not a
  collapsed one. Its suites also state their resolution (analysis.evidence.resolution): the smallest
  drop the degraded class can see at the suite's evaluation draws, and the draws a halving needs.
"""

from __future__ import annotations

from typing import Any

from gspo_bench.config.changes import field_default

V1, V2 = "v1", "v2"
DEFAULT_RULES = V1  # folders written before the key existed
COLLAPSE_SHARE = 0.25  # v2: a collapse's points below span at least this share of the run's evaluated steps
COLLAPSE_SHARES = {V1: 0.0, V2: COLLAPSE_SHARE}  # per rule set: the share a sustained drop must span
RULES_KEY = "analysis.rules"  # the key among a run's flattened suite settings (analysis.data.suites)


def suite_rules(settings: Any) -> str:
    """The rule set a run's suite declared (`settings`: its flattened suite settings, a dict; their
    `analysis.rules`), DEFAULT_RULES where it declared none; ValueError for a rule set this version does
    not know."""
    rules = settings.get(RULES_KEY) or DEFAULT_RULES
    if rules not in COLLAPSE_SHARES:
        raise ValueError(f"analysis.rules: {rules!r} is not a rule set of the stability map; known: "
                         f"{', '.join(COLLAPSE_SHARES)}")
    return str(rules)


def evaluation_draws(settings: Any) -> dict[str, int]:
    """A run's suite's evaluation draws per task (`settings`: its flattened suite settings): `eval_problems`
    (eval.limit) and `eval_samples` (eval.samples), each its field's default where the record predates it
    (as gspo_bench.config.changes reads a setting an older release did not write)."""
    return {f"eval_{name}": int(settings.get(f"eval.{key}") or field_default(f"suite.eval.{key}"))
            for name, key in (("problems", "limit"), ("samples", "samples"))}


def collapse_share(rules: str) -> float:
    """The share of the run's evaluated steps a sustained drop must span to be a collapse under `rules`."""
    return COLLAPSE_SHARES[rules]


def rules_sentence(rules_by_suite: dict[str, str]) -> str:
    """Which rules each suite was judged by, for the report."""
    said = {V1: "v1 (a sustained drop of 2 points is a collapse however short its span)",
            V2: f"v2 (a sustained drop is a collapse only over at least {COLLAPSE_SHARE:.0%} of the run's "
                "evaluated steps)"}
    return "Outcome rules: " + "; ".join(f"{suite} {said[rules]}" for suite, rules in rules_by_suite.items()) + "."
