"""The words the answer's five sentences share (analysis.report.answer_ran, answer_learned, answer_differs,
answer_paper, answer_decision; analysis.report.sections puts them in order): the answer's shape and limits,
the console's plain text, lists of names, a row of the numbers table, links to figures, and how the
groups (sweep points, suites) and the report's test are named.

The answer is the suite's in at most five plain sentences, the first thing `gspo-bench run` prints at its
end and the first thing report.md and report.html show: what ran; whether RL learned, and where; what
differs and how sure the test is at this n (a swept suite with a stability map: each arm's stability);
what the paper says and whether this run agrees; what to run for a decision.

The sentences read judgements made elsewhere and make none of their own: the learnability gate
(analysis.evidence.learning), the leader rule (analysis.evidence.leader), the verdict on each declared
comparison (analysis.evidence.declared), the declared family and Holm's adjustment
(analysis.evidence.family), the paper checks (analysis.evidence.paper, analysis.report.paper_checks) and the
stability map's boundaries (analysis.evidence.stability, analysis.evidence.placement). They hold words and
counts only: every mean, interval, p-value and per-seed value they rest on is a row of `numbers`, shown
below them. A count sits beside the word it counts with the gate's meaning ("passed the learnability test
on 0 of 2 seeds"), never beside a word that could read otherwise (a mean that went up is not "rose" when the
test did not pass).

Sentence text is markdown: user text (labels, sweep points) goes in through
`analysis.report.escape.escape`."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from analysis.data.groups import Group
from analysis.evidence.gather import Evidence
from analysis.report import anchors
from analysis.report.escape import SPECIAL, escape
from analysis.report.page import Sentence
from analysis.report.texts import count

MAX_SENTENCES, MAX_WORDS = 5, 40

_ESCAPED = re.compile(r"\\([" + re.escape(SPECIAL) + "])")  # analysis.report.escape's backslash escapes

SIGN_FLIP = "exact sign-flip test"



@dataclass(frozen=True)
class PlainAnswer:
    """`sentences` (at most five) and `numbers`: one row per figure they rest on (`sentence`: which one, 1-5)."""

    sentences: list[Sentence]
    numbers: pd.DataFrame



def plain_text(markdown: str) -> str:
    """A sentence as the console shows it: no bold or code marks, user text unescaped."""
    return _ESCAPED.sub(r"\1", re.sub(r"\*\*|(?<!\\)`", "", markdown))



def words(text: str) -> int:
    return len(re.findall(r"\S+", plain_text(text)))



def names(items: list[str]) -> str:
    """"a", "a and b", "a, b and c" (escaped)."""
    shown = [escape(i) for i in items]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]



def number_row(sentence: int, what: str, value: str, test: str = "", result: str = "") -> dict:
    return {"sentence": sentence, "what": what, "value": value, "test": test, "result": result}



def map_link(name: str, figures: set[str]) -> tuple:
    """A link to the stability map's figure `name` where the report has it: "figure (c)"."""
    return ((f"figure ({anchors.FIGURE_LETTERS[name]})", anchors.figure(name)),) if name in figures else ()



def figure_links(figures: set[str], *names_: str) -> tuple:
    return tuple(("figure", anchors.figure(n)) for n in names_ if n in figures)



def group_count(every: list[Group], n: int | None = None) -> str:
    """`n` (default: all) of the groups `every` in words, by what tells them apart: "3 sweep points" of one
    suite, "2 suites" none of which is swept, "4 pairs of suite and sweep point" otherwise."""
    n = len(every) if n is None else n
    if len({suite for suite, _ in every}) == 1:
        return count(n, "sweep point")
    if not any(facet for _, facet in every):
        return count(n, "suite")
    return f"{count(n, 'pair')} of suite and sweep point"



def group_in(every: list[Group]) -> str:
    """The preposition before `group_count`: "in" 2 suites, "at" 3 sweep points."""
    return "in" if len({suite for suite, _ in every}) > 1 and not any(facet for _, facet in every) else "at"



def holm_words(evidence: Evidence) -> str:
    return f"the {SIGN_FLIP}, Holm-adjusted over {count(evidence.family.size, 'comparison')}"
