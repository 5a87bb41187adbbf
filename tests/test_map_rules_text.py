"""The stability map's rules section names the outcome rules each suite was judged by (v1 for a suite that
declared none, as stages 0-2 of results/stability_cpu were run under; v2 where it declared `analysis:
{rules: v2}`) and states v2's change only where a suite used it; the docs hold that text word for word."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.data.load import load_results
from analysis.evidence.stability import stability_map
from analysis.report import anchors
from analysis.report.sections import Context, build_sections
from analysis.report.stability_text import COMPARISON_RULES, RULES, V2_RULES, rules_text
from tests.helpers.evaluated import evaluated_run

ROOT = Path(__file__).resolve().parent.parent
STEPS = [0.0, 10.0, 20.0]


def rules_section(root: Path) -> str:
    """The body of the report's rules section over the suites under `root`."""
    sections = build_sections(Context(load_results(root), float("nan"), False))
    (section,) = [s for s in sections if s.anchor == anchors.STABILITY_RULES]
    assert isinstance(section.body, str)
    return section.body


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """Two suites of two evaluated runs each (two suites: the map applies): `old` declares no rules, `new`
    declares v2; a folder of `old` and a second rule-less suite `older`, and one with both."""
    made = {}
    for name, suites in (("v1 only", ("old", "older")), ("both", ("old", "new"))):
        root = tmp_path_factory.mktemp(name.replace(" ", "_"))
        for suite in suites:
            fields = {"analysis": {"rules": "v2"}} if suite == "new" else {}
            for seed in range(2):
                evaluated_run(root, suite, seed, [0.4, 0.5, 0.6], STEPS, fields)
        made[name] = root
    return made


def test_a_suite_without_rules_is_said_to_be_judged_by_v1_and_v2_is_not_described(folders):
    body = rules_section(folders["v1 only"])
    assert body.startswith(RULES)
    assert "Outcome rules: old v1 (a sustained drop of 2 points is a collapse however short its span); older v1 (" in body
    assert V2_RULES not in body and "v2" not in body.split("Outcome rules:")[1]


def test_a_v2_suite_is_named_and_v2s_rule_is_described(folders):
    body = rules_section(folders["both"])
    assert body.startswith(RULES) and body.endswith(V2_RULES)
    said = body.split("Outcome rules:")[1]
    assert " old v1 (" in said and " new v2 (a sustained drop is a collapse only over at least 25% " in said
    assert "span at least 25% of the run's evaluated steps" in V2_RULES


def test_rules_text_reads_each_suites_rules_from_its_runs(folders):
    found = stability_map(load_results(folders["both"]))
    assert found is not None
    assert sorted(set(zip(found.classes["suite"], found.classes["rules"]))) == [("new", "v2"), ("old", "v1")]
    assert rules_text(found.classes) == rules_section(folders["both"])
    assert V2_RULES not in rules_text(found.classes[found.classes["suite"] == "old"])


def test_the_rules_in_the_report_are_the_rules_in_the_docs():
    """Declared before any run: docs/report.md holds the v1 rules (with the dose axis) and v2's change
    word for word."""
    docs = (ROOT / "docs" / "report.md").read_text()
    assert RULES in docs and V2_RULES in docs and COMPARISON_RULES in docs
    assert "The map's x axis is measured: each level's **dose**" in RULES
    assert "a **degenerate cell**" in COMPARISON_RULES and "McNemar's exact test of failure stratified by level" in \
        COMPARISON_RULES


def test_every_maps_rules_state_degenerate_cells_and_the_paired_test(folders):
    """The rules section of every map, whatever its suites' outcome rules, holds the rule for degenerate cells
    and for comparing two arms cell by cell, right after the classes' rules."""
    for root in folders.values():
        assert rules_section(root).startswith(RULES + "\n\n" + COMPARISON_RULES + "\n\n")
