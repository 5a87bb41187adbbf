"""Tuning in a suite (`tuning:`): the trial plan is deterministic and inside the declared space, trial
seeds are disjoint from the comparison's, bad input is refused in one line, and the comparison runs
carry the chosen settings."""

from __future__ import annotations

import json
import math
import re

import pytest
import yaml

from gspo_bench.config import SuiteError, parse_suite
from gspo_bench.config.spelling import SpellingNote
from gspo_bench.config.tuning import (
    LogUniform,
    arms_ruleset,
    comparison_suite,
    plan_trials,
    trial_settings,
    trial_suite,
)
from gspo_bench.suite.runner import plan_runs
from gspo_bench.suite.tuning_runs import Trials


def tuned_suite(**tuning) -> dict:
    """A tiny two-arm suite with a tuning section (`tuning` replaces its keys); never trained here."""
    section = {"trials": 6, "budget_share": 0.5, "seed": 3, "seeds": [10, 11],
               "select": {"metric": "countdown", "rule": "final"},
               "spaces": {"all": {"lr": {"log_uniform": [1e-4, 1e-3]}},
                          "gspo": {"clip_low": {"log_uniform": [3e-4, 3e-2]}, "clip_high": [4e-4, 4e-3, 4e-2]}},
               **tuning}
    return {
        "name": "tq", "task": {"name": "countdown", "params": {"count": 3}},
        "model": {"num_layers": 2, "hidden_size": 32, "expert_hidden": 32, "num_experts": 4, "top_k": 2},
        "warm_start": {"enabled": False}, "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4},
        "train": {"lr": 2e-4, "minibatches": 1}, "budget": {"kind": "steps", "value": 4},
        "objectives": [{"name": "grpo"}, {"name": "gspo"}], "seeds": [0, 1],
        "eval": {"tasks": ["countdown"], "every": 2, "limit": 8, "engine": "rollout"}, "tuning": section,
    }


def test_the_trial_plan_is_the_same_for_a_seed_and_moves_with_it():
    first = [(t.label, t.settings) for t in plan_trials(parse_suite(tuned_suite()))]
    again = [(t.label, t.settings) for t in plan_trials(parse_suite(tuned_suite()))]
    other = [(t.label, t.settings) for t in plan_trials(parse_suite(tuned_suite(seed=4)))]
    assert first == again
    assert [label for label, _ in first] == [f"{arm}.t{i:02d}" for arm in ("grpo", "gspo") for i in range(6)]
    assert [s for _, s in first] != [s for _, s in other]
    settings = [s for _, s in first]
    assert len({s["lr"] for s in settings}) == len(settings)  # quasi-random points, not one value repeated


def test_every_trial_lies_in_its_declared_space_and_fills_it():
    settings = trial_settings({"lr": LogUniform(log_uniform=(1e-4, 1e-2)), "w": [1, 2, 3]}, 64, seed=0)
    lrs = [s["lr"] for s in settings]
    assert all(1e-4 <= lr <= 1e-2 for lr in lrs)
    decades = [sum(lo <= math.log10(lr) < lo + 1 for lr in lrs) for lo in (-4, -3)]
    assert min(decades) >= 28  # log-uniform: each decade gets about half (Halton: 32 +- a few)
    assert {s["w"] for s in settings} == {1, 2, 3}  # a list is categorical: every value drawn, none other


def test_trials_are_the_arm_with_its_settings_at_the_trial_budget_on_trial_seeds():
    suite = parse_suite(tuned_suite())
    trials = trial_suite(suite)
    gspo = [t for t in plan_trials(suite) if t.arm == "gspo"]
    assert all(t.entry.clip_low == t.settings["clip_low"] and t.entry.clip_high == t.settings["clip_high"]
               and t.entry.lr == t.settings["lr"] and t.entry.objective == "gspo" for t in gspo)
    assert trials.seeds == [10, 11] and trials.budget.value == 2.0 and trials.tuning is None
    assert trials.task.params == {"count": 3, "held_out": "validation"}
    assert not set(trials.seeds) & set(suite.seeds)
    assert arms_ruleset(suite) == {"grpo": "tuned", "gspo": "tuned"}


def test_the_comparison_runs_carry_the_chosen_settings_on_the_comparison_seeds(tmp_path):
    suite = parse_suite(tuned_suite())
    chosen = {"grpo": {"lr": 3e-4}, "gspo": {"lr": 5e-4, "clip_low": 1e-3, "clip_high": 4e-3}}
    runs = plan_runs(comparison_suite(suite, chosen), tmp_path)
    assert sorted((r.name, r.entry.lr, r.entry.clip_low) for r in runs) == [
        ("grpo-s0", 3e-4, None), ("grpo-s1", 3e-4, None), ("gspo-s0", 5e-4, 1e-3), ("gspo-s1", 5e-4, 1e-3)]
    assert {r.entry.clip_range()["clip_high"] for r in runs if r.entry.run_label == "gspo"} == {4e-3}
    assert {r.suite.task.params.get("held_out") for r in runs} == {None}  # compared on the test split
    with pytest.raises(ValueError, match=r"no choice for \['gspo'\]"):
        comparison_suite(suite, {"grpo": {"lr": 3e-4}})


@pytest.mark.parametrize(("tuning", "message"), [
    ({"spaces": {"gspo": {}}}, r"spaces.gspo: empty search space"),
    ({"spaces": {"all": {"params.nope": [1, 2]}}}, r"objective grpo takes no keyword 'nope'"),
    ({"spaces": {"all": {"correction.params.low": [0.5]}}}, r"arm grpo has no correction to tune"),
    ({"spaces": {"all": {"model.num_layers": [2]}}}, r"model.num_layers: not a setting a space can tune"),
    ({"spaces": {"sapo": {"lr": [1e-4]}}}, r"tuning.spaces.sapo: not an arm of this suite"),
    ({"budget_share": None, "budget": {"value": 0}}, r"tuning.budget.value: Input should be greater than 0"),
    ({"budget_share": None, "budget": {"value": 5}}, r"larger than the suite's budget \(steps = 4\)"),
    ({"budget_share": 0}, r"tuning.budget_share: Input should be greater than 0"),
    ({"seeds": [1, 10]}, r"tuning.seeds: \[1\] also seed the comparison"),
    ({"select": {"metric": "reward/mean"}}, r"select.metric 'reward/mean': not a score the trials evaluate"),
    ({"select": {"metric": "countdown", "rule": "best"}}, r"tuning.select.rule: Input should be 'final' or 'auc'"),
])
def test_bad_tuning_input_is_one_line_naming_the_field(tuning, message):
    with pytest.raises(SuiteError, match=message) as err:
        parse_suite(tuned_suite(**tuning))
    assert "\n" not in str(err.value)


def test_arms_tuned_on_unequal_budgets_are_refused_unless_the_suite_allows_it():
    only_gspo = {"spaces": {"gspo": {"lr": {"log_uniform": [1e-4, 1e-3]}}}}
    with pytest.raises(SuiteError, match=r"unequal budgets \(trials: grpo 0, gspo 6\)"):
        parse_suite(tuned_suite(**only_gspo))
    with pytest.raises(SuiteError, match=r"unequal budgets \(trials: grpo 6, gspo 2\)"):
        parse_suite(tuned_suite(arm_trials={"gspo": 2}))
    allowed = parse_suite(tuned_suite(**only_gspo, allow_unequal=True))
    assert arms_ruleset(allowed) == {"grpo": "defaults", "gspo": "tuned"}
    assert [t.arm for t in plan_trials(allowed)] == ["gspo"] * 6


def test_validate_and_the_dry_run_show_the_trials_and_the_tuning_compute(tmp_path, cli):
    path = tmp_path / "tq.yaml"
    path.write_text(yaml.safe_dump(tuned_suite()))
    shown = cli("validate", path)
    assert shown.exit_code == 0, shown.output
    assert "tuning first: 12 trials x seeds [10, 11] on the validation split" in shown.output
    gspo = plan_trials(parse_suite(tuned_suite()))[6]
    assert f"gspo.t00: clip_high={gspo.settings['clip_high']:.3g}, clip_low={gspo.settings['clip_low']:.3g}" in shown.output
    planned = cli("run", path, "--dry-run")
    assert planned.exit_code == 0, planned.output
    flops = re.search(r"FLOPs, tuning vs comparison\s*│ grpo ([\d.e+]+) vs ([\d.e+]+)", planned.output)
    assert flops and float(flops[1]) == pytest.approx(3 * float(flops[2]), rel=1e-2)  # 6 trials x 2 seeds x 2 steps vs 2 x 4
    assert "each steps = 2 (>= 2 steps)" in planned.output


def test_no_choice_is_made_while_a_trial_run_has_not_ended(tmp_path):
    suite = parse_suite(tuned_suite())
    for trial in plan_trials(suite):
        for seed in (10, 11):
            folder = tmp_path / "tq" / "tuning" / f"{trial.label}-s{seed}"
            folder.mkdir(parents=True)
            ended = "failed" if (trial.label, seed) == ("gspo.t03", 11) else "collapsed" if seed == 11 else "done"
            (folder / "status.json").write_text(json.dumps({"schema_version": 1, "status": ended}))
    assert Trials.of(suite, tmp_path).unended() == ["gspo.t03-s11"]
    with pytest.raises(ValueError, match=r"1 trial run\(s\) did not end \(gspo.t03-s11\).*--resume` continues them"):
        Trials.of(suite, tmp_path).write_chosen()
    assert not (tmp_path / "tq" / "tuning" / "chosen.json").exists()


def test_trial_runs_go_to_the_tuning_folder_and_start_from_the_comparisons_weights(tmp_path):
    """A trial trains on the validation-held-out task, but its starting weights (the warm start, cached by
    its suite's task) are the comparison's: a task with another held-out split must not warm-start anew."""
    suite = parse_suite(tuned_suite())
    runs = Trials.of(suite, tmp_path).runs()
    assert len(runs) == 12 * 2 and runs[0].run_dir == tmp_path / "tq" / "tuning" / "grpo.t00-s10"
    assert {r.suite.task.params.get("held_out") for r in runs} == {"validation"}
    assert {r.start.model_dump_json() for r in runs} == {suite.model_dump_json()}


def test_a_correction_parameter_is_tuned_under_params_and_a_wrong_one_is_refused_at_its_tuning_path():
    """`correction.params.cap` (the path a sweep and `--set` give after `objectives.N.`) on a grpo + tis
    arm: every trial (and the comparison) runs the arm's correction with the drawn cap, nested as {kind,
    params}; `correction.params.nope` is refused naming the space's path (it read as the suite's own
    `correction:`, which is valid), and so is `correction.kind`, which names no parameter."""
    data = tuned_suite(spaces={"all": {"correction.params.cap": [1.5, 3.0]}}, trials=2)
    data["objectives"] = [{"name": "grpo", "label": "grpo_tis", "correction": {"kind": "tis", "params": {"cap": 2.0}}}]
    suite = parse_suite(data)
    trials = plan_trials(suite)
    assert sorted(t.entry.correction["params"]["cap"] for t in trials) == [1.5, 3.0]
    assert {t.entry.correction["kind"] for t in trials} == {"tis"}
    assert sorted(e.correction_fn().keywords["cap"] for e in trial_suite(suite).objectives) == [1.5, 3.0]
    compared = comparison_suite(suite, {"grpo_tis": {"correction.params.cap": 3.0}}).objectives[0]
    assert compared.correction == {"kind": "tis", "params": {"cap": 3.0}}
    data["tuning"]["spaces"] = {"all": {"correction.params.nope": [1.5, 3.0]}}
    with pytest.raises(SuiteError, match=r"tuning.spaces \(grpo_tis\).correction.params.nope: correction tis takes "
                                         r"no parameter 'nope'; it takes: cap, level"):
        parse_suite(data)
    data["tuning"]["spaces"] = {"all": {"correction.kind": ["tis", "mis"]}}
    with pytest.raises(SuiteError, match=r"correction.kind: not a parameter of correction tis; a space tunes one as "
                                         r"correction.params.NAME, NAME one of: cap, level"):
        parse_suite(data)


def test_the_old_spellings_of_a_space_path_read_as_the_one_spelling_with_a_note():
    """`correction.cap` and `kwargs.NAME` (last round's spellings) read as `correction.params.cap` and
    `params.NAME`, each noted: the trials, their plan and the comparison hold the one spelling, and the
    plan is the one of the suite spelled the new way; a setting spelled both ways is refused."""
    def suite_with(space: dict) -> dict:
        data = tuned_suite(spaces={"all": space}, trials=3)
        data["objectives"] = [{"name": "dppo_binary_tv", "label": "tv",
                               "correction": {"kind": "tis", "params": {"cap": 2.0}}}]
        return data

    new = parse_suite(suite_with({"correction.params.cap": [1.5, 3.0], "params.delta": [0.1, 0.2]}))
    with pytest.warns(SpellingNote) as noted:
        old = parse_suite(suite_with({"correction.cap": [1.5, 3.0], "kwargs.delta": [0.1, 0.2]}))
    notes = {str(n.message) for n in noted}
    assert "tuning.spaces.all: `correction.cap` is the old spelling of `correction.params.cap` (it still reads; new " \
           "suite files write `correction.params.cap`: docs/suites.md)" in notes
    assert any("`kwargs.delta` is the old spelling of `params.delta`" in n for n in notes)
    assert old.tuning == new.tuning
    assert [t.settings for t in plan_trials(old)] == [t.settings for t in plan_trials(new)]
    assert set(plan_trials(old)[0].settings) == {"correction.params.cap", "params.delta"}
    assert [(t.entry.correction, t.entry.params) for t in plan_trials(old)] == \
        [(t.entry.correction, t.entry.params) for t in plan_trials(new)]
    # chosen.json written with the old spelling still applies to the comparison
    assert comparison_suite(new, {"tv": {"correction.cap": 3.0}}).objectives[0].correction["params"]["cap"] == 3.0
    with pytest.raises(SuiteError, match=r"tuning.spaces.*all: correction.cap and correction.params.cap are one "
                                         r"setting spelled twice; write correction.params.cap only"), \
            pytest.warns(SpellingNote):
        parse_suite(suite_with({"correction.cap": [1.5], "correction.params.cap": [3.0]}))


def test_an_arms_own_space_wins_over_all_on_a_path_both_name():
    """`all` gives every arm its lr range; gspo's own lr range replaces it for gspo alone (and adds its
    clip range), grpo keeps `all`'s."""
    suite = parse_suite(tuned_suite(spaces={"all": {"lr": {"log_uniform": [1e-4, 1e-3]}},
                                            "gspo": {"lr": [7e-3, 8e-3], "clip_high": [4e-4, 4e-3]}}))
    lrs = {arm: {t.settings["lr"] for t in plan_trials(suite) if t.arm == arm} for arm in ("grpo", "gspo")}
    assert lrs["gspo"] == {7e-3, 8e-3}
    assert all(1e-4 <= lr <= 1e-3 for lr in lrs["grpo"]) and len(lrs["grpo"]) == 6
    assert {t.entry.lr for t in plan_trials(suite) if t.arm == "gspo"} == {7e-3, 8e-3}
    assert set(suite.tuning.arm_space("gspo")) == {"lr", "clip_high"} and set(suite.tuning.arm_space("grpo")) == {"lr"}


def test_a_trial_may_spend_the_whole_suite_budget_and_no_more():
    at_most = parse_suite(tuned_suite(budget_share=None, budget={"value": 4}))
    assert trial_suite(at_most).budget.value == 4
    with pytest.raises(SuiteError, match=r"tuning.budget.value \(4.5\) is larger than the suite's budget"):
        parse_suite(tuned_suite(budget_share=None, budget={"value": 4.5}))


def test_the_selection_metric_must_be_the_suites_task_even_where_another_eval_task_is_listed():
    """An eval task other than the suite's task is evaluated on its own test data, not on the suite task's
    validation split: choosing by it would tune on a test set."""
    data = tuned_suite(select={"metric": "sort"})
    data["eval"]["tasks"] = ["countdown", "sort"]
    with pytest.raises(SuiteError, match=r"tuning.select.metric 'sort': not a score the trials evaluate on the "
                                         r"validation split; the only one is 'countdown'"):
        parse_suite(data)


def write_trial_runs(suite, root, status: str = "done", score=lambda trial, seed: 0.5) -> None:
    """Every trial run of `suite` under `root` as a finished run would leave it, without training: its
    config.yaml as the run records it, its status, and its validation evaluations (`score` at steps 0 and 2)."""
    import pandas as pd

    from gspo_bench.config.run import resolved_config
    from gspo_bench.train.evaluation import lm_eval_name

    for run in Trials.of(suite, root).runs():
        run.run_dir.mkdir(parents=True)
        (run.run_dir / "config.yaml").write_text(resolved_config(run))
        (run.run_dir / "status.json").write_text(json.dumps(
            {"schema_version": 1, "status": status, "step": 2, "message": "" if status == "done" else "it broke"}))
        value = score(run.entry.run_label, run.seed)
        pd.DataFrame({"task": lm_eval_name("countdown"), "step": [0, 2], "score": [0.0, value]}).to_parquet(
            run.run_dir / "eval.parquet")


def test_chosen_json_holds_the_settings_each_trial_ran_and_an_edited_space_is_refused_before_any_run(tmp_path, cli):
    """The trials ran under one space, the space is then edited: choosing again must not score the trials'
    old runs as the new space's settings (chosen.json paired each trial's new settings with its old run's
    score: the comparison trained at a value no trial tried), and `run --resume --allow-changed` (what
    the refusal of an edited suite advises) must not start the comparison beside trials of another
    space. Both are refused naming the trial run, the setting and both values, before any run."""
    old = parse_suite(tuned_suite())
    write_trial_runs(old, tmp_path, score=lambda trial, seed: {"gspo.t04": 0.9, "grpo.t02": 0.8}.get(trial, 0.1))
    recorded = tmp_path / "tq" / "tuning" / "gspo.t04-s10" / "config.yaml"  # as written before `credit` existed
    config = yaml.safe_load(recorded.read_text())
    for entry in config["suite"]["objectives"]:
        del entry["credit"], entry["step_penalty"]
    recorded.write_text(yaml.safe_dump(config))
    record = Trials.of(old, tmp_path).write_chosen()
    ran = {t.label: t for t in plan_trials(old)}
    assert record["chosen"]["gspo"]["settings"] == ran["gspo.t04"].settings
    assert record["chosen"]["grpo"]["settings"] == ran["grpo.t02"].settings
    assert [r["settings"] for r in record["trials"]] == [t.settings for t in plan_trials(old)]
    chosen = (tmp_path / "tq" / "tuning" / "chosen.json").read_text()

    edited = tuned_suite(spaces={"all": {"lr": {"log_uniform": [1e-4, 1e-3]}},
                                 "gspo": {"clip_low": {"log_uniform": [3e-4, 3e-2]}, "clip_high": [5e-4, 5e-3, 5e-2]}})
    was, now = ran["gspo.t00"].settings["clip_high"], plan_trials(parse_suite(edited))[6].settings["clip_high"]
    assert was != now
    refusal = (rf"{tmp_path / 'tq' / 'tuning' / 'gspo.t00-s10'}: trial gspo.t00 ran other settings than the suite plans "
               rf"for it now \(clip_high: {was!r} ran, {now!r} planned now\): the tuning space, its seed or the arm "
               r"changed since the trials ran")
    with pytest.raises(ValueError, match=refusal):
        Trials.of(parse_suite(edited), tmp_path).write_chosen()
    path = tmp_path / "tq.yaml"
    path.write_text(yaml.safe_dump(edited))
    result = cli("run", path, "--out", tmp_path, "--resume", "--allow-changed")
    assert result.exit_code == 2 and re.search(refusal, " ".join(result.output.split())), result.output
    assert "another folder (--out) to tune it anew" in " ".join(result.output.split())
    assert (tmp_path / "tq" / "tuning" / "chosen.json").read_text() == chosen
    assert not (tmp_path / "tq" / "grpo-s0").exists()


def test_a_space_value_no_trial_can_run_with_is_refused_naming_its_key_and_value(tmp_path, cli):
    """`clip_high` up to 1e300 validated, and every trial drawing near it failed at its first update, on
    every --resume alike: each value a space can give (a list's values, a range's ends) is checked as the
    suite's own setting is, by the schema and on a tiny batch, before any trial."""
    data = tuned_suite(spaces={"all": {"lr": {"log_uniform": [1e-4, 1e-3]}},
                               "gspo": {"clip_high": {"log_uniform": [4e-4, 1e300]}}})
    path = tmp_path / "tq.yaml"
    path.write_text(yaml.safe_dump(data))
    refused = cli("validate", path)
    assert refused.exit_code == 2
    assert " ".join(refused.output.split()) == (f"error: {path}: tuning.spaces.gspo.clip_high = 1e+300 (arm gspo): value "
                                                "cannot be converted to type float without overflow")
    with pytest.raises(SuiteError, match=r"tuning.spaces.all.lr = -1.0 \(arm grpo\): Input should be greater than 0"):
        parse_suite(tuned_suite(trials=1, spaces={"all": {"lr": [1e-3, -1.0]}}))


def test_an_arm_whose_every_trial_failed_ends_the_suite_saying_so_not_asking_for_a_resume(tmp_path):
    """Every trial of gspo failed: nothing to choose from, and `--resume` (what the refusal advised) ran
    them again to the same end, for ever. The refusal names the arm and the first failure; an arm with
    some trial still unended is asked to resume, as before."""
    suite = parse_suite(tuned_suite())
    write_trial_runs(suite, tmp_path)
    for seed in (10, 11):
        for index in range(6):
            status = tmp_path / "tq" / "tuning" / f"gspo.t{index:02d}-s{seed}" / "status.json"
            status.write_text(json.dumps({"schema_version": 1, "status": "failed", "step": 0,
                                          "message": f"RuntimeError: overflow ({index})"}))
    with pytest.raises(ValueError, match=r"^every trial run of arm gspo failed \(12 of 12; the first, gspo.t00-s10: "
                                         r"RuntimeError: overflow \(0\)\): no setting of its space trained") as err:
        Trials.of(suite, tmp_path).write_chosen()
    assert "fix what failed them first" in str(err.value) and "\n" not in str(err.value)
    (tmp_path / "tq" / "tuning" / "gspo.t05-s11" / "status.json").write_text(json.dumps(
        {"schema_version": 1, "status": "done", "step": 2}))
    with pytest.raises(ValueError, match=r"^11 trial run\(s\) did not end .*`gspo-bench run SUITE --resume`"):
        Trials.of(suite, tmp_path).write_chosen()


def test_a_session_conducts_trials_then_the_choice_then_the_comparison(tmp_path, monkeypatch):
    """`Session.run` is the one conductor of a tuned suite: the trial runs (of the trial suite, into
    OUT/<suite>/), then each arm's choice written to chosen.json, then the comparison's runs with the chosen
    settings (of the suite, into OUT/), each launch's statuses shown under its title; the trial plan is made
    once, in `plan_session`."""
    import contextlib

    from gspo_bench.config import tuning as tuning_module
    from gspo_bench.suite import runner
    from gspo_bench.suite.session import Launch, plan_session

    path = tmp_path / "tq.yaml"
    path.write_text(yaml.safe_dump(tuned_suite(trials=2, spaces={"gspo": {"clip_high": [4e-4, 4e-3]}}, allow_unequal=True)))
    session = plan_session(path, None, out=tmp_path / "out")
    assert session.awaiting_choice and session.todo == [] and len(session.trials) == 2 * 2  # 2 trials x 2 seeds
    launched, shown, compared = [], [], []

    def run_suite(suite, todo, root, **kwargs):
        launched.append((suite.name, root, [run.name for run in todo]))
        compared.extend(run.entry.clip_high for run in todo if suite.name == "tq" and run.arm == "gspo")
        if suite.name == "tuning":  # the trials end as finished runs do, gspo.t01 scoring best
            write_trial_runs(session.suite, session.root, score=lambda trial, seed: 0.9 if trial == "gspo.t01" else 0.1)
        return [(run, {"status": "done", "step": 2}) for run in todo]

    class Show:
        def say(self, text):
            shown.append(text)

        def progress(self, runs):
            return contextlib.nullcontext(None)

        def statuses(self, outcomes, title):
            shown.append(f"{title}: {len(outcomes)}")

    plans = []
    monkeypatch.setattr(runner, "run_suite", run_suite)
    monkeypatch.setattr(tuning_module, "plan_trials", lambda suite: plans.append(suite) or [])  # planned already
    outcomes = session.run(Launch(), Show())
    assert plans == []
    assert launched == [("tuning", tmp_path / "out" / "tq", ["gspo.t00-s10", "gspo.t01-s10", "gspo.t00-s11", "gspo.t01-s11"]),
                        ("tq", tmp_path / "out", ["grpo-s0", "gspo-s0", "grpo-s1", "gspo-s1"])]
    chosen = json.loads((tmp_path / "out" / "tq" / "tuning" / "chosen.json").read_text())["chosen"]
    assert chosen["gspo"]["label"] == "gspo.t01"
    assert chosen["gspo"]["settings"] == next(t.settings for t in session.tuning.plan if t.label == "gspo.t01")
    assert compared == [chosen["gspo"]["settings"]["clip_high"]] * 2  # the comparison runs the choice
    assert shown == ["tuning: 4 trial runs to do (OUT/tq/tuning/)", f"trials of tq -> {tmp_path / 'out' / 'tq' / 'tuning'}: 4",
                     f"suite tq -> {tmp_path / 'out' / 'tq'}: 4"]
    assert len(outcomes) == 8
