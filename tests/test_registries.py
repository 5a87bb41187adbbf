"""The four registries (objectives, corrections, tasks, rollout engines) are one `Registry`: the same
collision refusal, the same unknown-name message listing every valid name, the same origins. A
registry that went back to its own dict and messages fails here."""

from __future__ import annotations

import pytest
import torch

from gspo_bench.objectives import corrections
from gspo_bench.objectives import registry as objectives
from gspo_bench.registry import NameTakenError, Registry, UnknownNameError
from gspo_bench.rollout import engine
from gspo_bench.tasks import registry as tasks


def objective(logp, old_logp, advantages, mask, weights=None):
    return torch.zeros(()), {}


def correction(old_logp, sampling_logp, mask):
    return torch.ones_like(mask), {}


def factory():
    return None


# kind -> (module, registry attribute, register(name) -> decorator, lookup(name), list(), an entry fn)
KINDS = {
    "objective": (objectives, "_REGISTRY", lambda n: objectives.register_objective(n, description="d", reference="r"),
                  objectives.objective_spec, objectives.list_objectives, objective, "valid objectives: "),
    "correction": (corrections, "_CORRECTIONS", lambda n: corrections.register_correction(n, description="d", reference="r"),
                   corrections.correction_spec, corrections.list_corrections, correction, "valid corrections: "),
    "task": (tasks, "_TASKS", lambda n: tasks.register_task(n, "d"), tasks.task_spec, tasks.list_tasks, factory,
             "valid tasks: "),
    "rollout engine": (engine, "_ENGINES", engine.register_engine, engine.make_engine, engine.list_engines, factory,
                       "valid engines: "),
}


@pytest.fixture(params=sorted(KINDS))
def kind(request, monkeypatch):
    module, attribute, *rest = KINDS[request.param]
    table = getattr(module, attribute)
    assert isinstance(table, Registry) and table.kind == request.param
    monkeypatch.setattr(module, attribute, table.copy())
    return request.param, getattr(module, attribute), *rest


def test_a_taken_name_is_refused_naming_its_module(kind):
    name, table, register, _, listed, entry, _ = kind
    taken = listed()[0]
    with pytest.raises(NameTakenError) as err:
        register(taken)(entry)
    assert str(err.value) == (f"{name} {taken!r} is already registered (by {table.origin(taken)}); pick another name")
    assert table.origin(taken).startswith("gspo_bench.")


def test_an_unknown_name_lists_every_valid_name(kind):
    name, table, _, lookup, listed, _, plural = kind
    with pytest.raises(LookupError) as err:
        lookup("no_such_thing")
    assert str(err.value) == f"unknown {name} 'no_such_thing'; {plural}{', '.join(listed())}"
    assert isinstance(err.value, table.unknown)


def test_a_new_name_is_listed_with_its_origin(kind):
    _, table, register, lookup, listed, entry, _ = kind
    register("zz_new")(entry)
    assert "zz_new" in listed() and table.origin("zz_new") == __name__
    lookup("zz_new")  # found, not refused


def test_the_registry_alone():
    table: Registry[int] = Registry("widget")
    table.add("a", 1, "here")
    with pytest.raises(NameTakenError, match=r"widget 'a' is already registered \(by here\)"):
        table.add("a", 2, "there")
    with pytest.raises(UnknownNameError, match="unknown widget 'b'; valid widgets: a"):
        table.lookup("b")
    twin = table.copy()
    twin.add("b", 2, "there")
    assert table.names() == ["a"] and twin.names() == ["a", "b"]
    twin["a"] = 3  # the mapping face replaces without the check (tests swap implementations)
    assert twin.lookup("a") == 3 and twin.origin("a") == "here"
    del twin["a"]
    assert twin.names() == ["b"]


def test_a_value_that_is_not_callable_is_refused_naming_it(kind):
    """A register decorator put on a value (nothing could ever call it) is refused at registration, naming
    the kind, the name and the value, not later where the loop calls it."""
    name, table, register, _, listed, _, _ = kind
    before = listed()
    with pytest.raises(TypeError) as err:
        register("zz_value")(3)
    assert str(err.value) == (f"{name} 'zz_value': the register decorator is put on 3 (int), which is not callable: "
                              "put it on a function (or a class)")
    assert listed() == before
