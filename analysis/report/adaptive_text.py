"""The report's section on an adaptive suite (`adaptive:`): the rule as declared, its rounds, the runs it
made against the grid's, and where each arm stands, with how to read a bracket the rule stopped on."""

from __future__ import annotations

from analysis.data.adaptive import AdaptiveRecord

READING = ("How to read it: the rule stopped on what it had seen, so a bracket rests on the runs behind each end "
           "(a held end on n runs bounds its failure rate at 1 - 0.05^(1/n), exact one-sided 95%: 78% on 2, 53% on "
           "4, 39% on 6), never on the grid's counts, and nothing is pooled across levels. The map and the paired "
           "tests above read the runs that were made: two arms share only the cells both were placed on. "
           "docs/suites.md, \"Adaptive placement\", states the rule.")


def rule_words(rule: dict) -> str:
    parts = [f"first_seeds {rule.get('first_seeds', 2)}",
             f"confirm_seeds {rule.get('confirm_seeds') or rule.get('first_seeds', 2)}",
             f"spacing {rule.get('spacing', 'log')}"]
    parts += [f"factor {rule['factor']:g}"] if rule.get("factor") else []
    parts += [f"budget {rule['budget']} runs"] if rule.get("budget") else []
    return ", ".join(parts)


def adaptive_text(records: dict[str, AdaptiveRecord]) -> str:
    """Per adaptive suite: the rule, the rounds and runs against the grid, each arm's standing."""
    blocks = []
    for suite, record in records.items():
        runs = sum(len(r) for r in record.rounds)
        sizes = ", ".join(str(len(r)) for r in record.rounds)
        lines = [f"Suite {suite} placed its runs by the adaptive rule it declares ({rule_words(record.rule)}): "
                 f"{len(record.rounds)} rounds of {sizes} runs, {runs} runs in all against the grid's {record.grid_runs} "
                 f"({record.arms} arms x {record.levels} levels x {record.seeds} seeds, {runs / record.grid_runs:.0%}).",
                 "", "Where each arm stands (the log's last standing):", ""]
        lines += [f"- {line}" for line in record.standing] or ["- (no standing logged yet)"]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks + [READING])
