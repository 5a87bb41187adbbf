"""How the report says a comparison holds by construction (analysis.evidence.construction): in the
answer's sentence a few words after the comparison, with the reason in plain words under it, in the
numbers table with the run-median KLs it rests on, and in the verdict's line for the comparison. Two
arms that train one gradient (GSPO and GSPO-token with per-response advantages) are said to be one
objective, in an item under the answer's third sentence, a numbers row with the settings it rests on,
and the verdict (after the declared comparison, or a sentence of its own): their comparison tests nothing.

Text is markdown: arm names go in through `analysis.report.escape.escape`."""

from __future__ import annotations

from typing import Any

from analysis.evidence.construction import ByConstruction, SameGradient
from analysis.evidence.declared import EXPLORATORY, IN_FAMILY
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


ONE_OBJECTIVE = "are one objective by construction"


SAME_WHY = ("with per-response advantages and the same settings, GSPO-token's ratio `sg[s_i]·π/sg[π]` takes s_i's "
            "value and its gradient is GSPO's, so their comparison tests nothing")


def same_item(found: SameGradient, standing: str) -> str:
    """The item under the answer's third sentence, and the verdict's sentence for a pair not declared: "gspo
    and gspo_token are one objective by construction: with per-response advantages ... tests nothing (it
    stays counted in Holm's family)."; `standing`: where the comparison stands (" (...)", or "" where none is made)."""
    return f"{escape(found.gspo)} and {escape(found.token)} {ONE_OBJECTIVE}: {SAME_WHY}{standing}."


STANDING = {IN_FAMILY: " (it stays counted in Holm's family)", EXPLORATORY: " (it stays among the exploratory comparisons)"}


def standing_words(standing: str | None) -> str:
    """Where the comparison of two arms that are one objective by construction stands
    (analysis.evidence.declared.standing), for same_item: "" where it is not made."""
    return STANDING[standing] if standing is not None else ""


def same_clause(found: SameGradient) -> str:
    """The verdict's sentence after a declared comparison of the two: "By construction, gspo and gspo_token are
    one objective: ...", the declaration kept."""
    return f"By construction, {escape(found.gspo)} and {escape(found.token)} are one objective: {SAME_WHY}."


def _setting(value: Any) -> str:
    return "default" if value is None else format(value, "g") if isinstance(value, float) else str(value)


def settings_text(found: SameGradient) -> str:
    """The recorded settings the judgement rests on: "built-in objectives, credit response, lr 0.0002, clip
    0.0003 / 0.0004, no replay, no correction, params {}, set {}"."""
    s = found.settings
    replay = f"replay {s['replay_from'] or 'old_pass'}" if s["replay"] else "no replay"
    return (f"built-in objectives, credit {s['credit']}, lr {_setting(s['lr'])}, clip {_setting(s['clip_low'])} / "
            f"{_setting(s['clip_high'])}, {replay}, no correction, params {s['params']}, set {s['set']}, on every run")
