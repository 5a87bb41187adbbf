"""How the report says a comparison holds by construction (analysis.evidence.construction): in the
answer's sentence a few words after the comparison, with the reason in plain words under it, in the
numbers table with the run-median KLs it rests on, and in the verdict's line for the comparison.

Text is markdown: arm names go in through `analysis.report.escape.escape`."""

from __future__ import annotations

from analysis.evidence.construction import ByConstruction
from analysis.evidence.stability import KL_FLOOR
from analysis.report.escape import escape
from analysis.report.texts import count

HOLDS = "which holds by construction"  # right after a decided comparison in the answer's sentence


def control_words(found: ByConstruction) -> str:
    """Why: "grpo_r3's measured engine/trainer mismatch is float rounding (at most 1e-08) where grpo's is
    0.72 per token, so it faces none of the mismatch and is the noise-free control here, not a robust
    objective"."""
    return (f"{escape(found.free)}'s measured engine/trainer mismatch is float rounding (at most {KL_FLOOR:g}) "
            f"where {escape(found.other)}'s is {found.other_kl:.2g} per token, so it faces none of the mismatch "
            "and is the noise-free control here, not a robust objective")


def decided_item(found: ByConstruction) -> str:
    """The item under the answer's sentence for a decided comparison that holds by construction (the arm
    that faces no mismatch ends above)."""
    return f"{escape(found.free)} ends above {escape(found.other)} by construction: {control_words(found)}."


def row_note(found: ByConstruction) -> str:
    """The numbers table's note: the run-median KLs the judgement rests on."""
    free_runs, other_runs = found.runs
    return (f"by construction: {found.free}'s run-median mismatch KL is float rounding (at most {KL_FLOOR:g}, "
            f"largest {found.free_kl:.2g}) on each of its {count(free_runs, 'run')}, {found.other}'s "
            f"{found.other_kl:.3g} per token (median of its {count(other_runs, 'run')})")


def construction_clause(found: ByConstruction, decided: bool) -> str:
    """The verdict line's clause: "which holds by construction: ..." after a decided comparison the
    noise-free arm ends above; "By construction, ..." as its own sentence after any other."""
    return f"{HOLDS}: {control_words(found)}" if decided else f"By construction, {control_words(found)}"
