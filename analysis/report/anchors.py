"""Names of the report's sections, figures and figure files: the verdict links to them, the renderers
put them on the headings, the report writes the files. One place, so a link and its target cannot
drift apart.

Names built from user text (labels, sweep points, suite names) go through the rule run folders use,
`gspo_bench.rundir.names.folder_name`: two different texts never give one name (`a.b` and `a,b` stay apart)
and a name is at most 120 characters whatever the text. Its `%XX` escapes are themselves escaped
(`link`) where a name becomes a URL: a file `a%2Fb.png` is linked as `a%252Fb.png`.
"""

from __future__ import annotations

from urllib.parse import quote

from analysis.data.groups import Group, group_key
from gspo_bench.rundir.names import folder_name

ANSWER = "answer"
SUMMARY = "summary-per-objective"
BY_POINT = "final-reward-by-sweep-point"
FIGURES = "figures"  # the section holding the figures
NUMBERS = "answer-numbers"  # the table of the numbers below the answer's sentences
DETAIL = "answer-detail"  # the verdict's sentences (analysis.report.verdict), below the figures
SUITE_SUMMARY = "suite-summary"
LEARNABILITY = "learnability"
COMPARISONS = "comparisons"
UNFINISHED = "unfinished-runs"
PRIMARY = "primary-comparisons"
EXPLORATORY_TABLE = "exploratory-comparisons"
FOREST = "forest_primary"  # the figure of the declared comparisons


def part(text: str) -> str:
    """User text as a part of a file name or anchor (see the module docstring)."""
    return folder_name(text) if text else ""


def paper(group: Group, only: bool = True) -> str:
    """The "Paper vs this run" table of one group (`only`: the report's only group)."""
    return "paper-vs-run" if only else f"paper-vs-run-{part(group_key(group))}"


def figure(name: str) -> str:
    return f"figure-{name}"


def link(target: str) -> str:
    """A file name or anchor as it goes in a URL (markdown links, href): every character but letters,
    digits and `_.-~` percent-encoded, `%` included."""
    return quote(target, safe="")


# the stability map (analysis.evidence.stability): its sections and figures
STABILITY = "stability-map"
STABILITY_RULES = "stability-rules"
CHANGE_VS_KL = "stability_change_vs_kl"
CELLS = "stability_cells"
COLLAPSE_PROBABILITY = "stability_collapse_probability"
DRIFT_VS_ROUTER_LR = "stability_drift_vs_router_lr"
SURVIVAL = "stability_survival"
FIGURE_LETTERS = {CHANGE_VS_KL: "a", CELLS: "b", COLLAPSE_PROBABILITY: "c", DRIFT_VS_ROUTER_LR: "d", SURVIVAL: "e"}
