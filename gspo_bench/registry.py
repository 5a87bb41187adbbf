"""One registry for every kind of registered thing (objectives, corrections, tasks, rollout engines).

A `Registry` is a name -> entry table with the rules all four share, in one place: a second entry
under a taken name is refused with the module that holds it, a lookup of an unknown name lists every
valid name, and each entry remembers the module that registered it (so a run can say which of its
arms came from a plugin). The kinds add their own checks on top (an objective's signature and
declared inputs) before they `add`.

The mapping face (`registry[name] = entry`, `del registry[name]`) replaces an entry without the
collision check: tests and experiments swap an implementation in and out with it; registration goes
through `add`. A plugin only adds: `gspo_bench.config.plugins` compares every registry's `snapshot`
before and after loading one and refuses a plugin that replaced or removed an entry (through the
mapping face or the tables themselves), restoring them.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any, TypeVar

T = TypeVar("T")


class UnknownNameError(LookupError):
    """A name that is not registered; the message lists the valid names."""


class NameTakenError(ValueError):
    """A registration under a name that is already registered; the message names who holds it."""


KINDS: dict[str, Registry[Any]] = {}  # kind -> the package's registry of it (a plugin's additions are found here)


def origin_of(kind: str, name: str, fn: object) -> str:
    """The module that defines `fn`, about to be registered as the `kind` `name`; TypeError naming both
    where `fn` is not callable (a register decorator put on a value: nothing could ever call it)."""
    if not callable(fn):
        raise TypeError(f"{kind} {name!r}: the register decorator is put on {repr(fn)[:40]} ({type(fn).__name__}), "
                        "which is not callable: put it on a function (or a class)")
    return str(getattr(fn, "__module__", None) or "")


class Registry(MutableMapping[str, T]):
    """Entries of one kind by name (e.g. `Registry("rollout engine", "engines")`)."""

    def __init__(self, kind: str, plural: str | None = None, unknown: type[LookupError] = UnknownNameError,
                 listed: bool = True):
        self.kind = kind
        self.plural = plural or f"{kind}s"
        self.unknown = unknown  # the LookupError subclass a miss raises (objectives keep their own)
        self._entries: dict[str, T] = {}
        self._origins: dict[str, str] = {}
        if listed:
            KINDS[kind] = self

    def add(self, name: str, entry: T, origin: str) -> None:
        """Register `entry` as `name`, made by module `origin`; NameTakenError if the name is taken."""
        if name in self._entries:
            raise NameTakenError(f"{self.kind} {name!r} is already registered (by {self._origins[name]}); "
                                 "pick another name")
        self._entries[name] = entry
        self._origins[name] = origin

    def lookup(self, name: str) -> T:
        """The entry of `name`, or `self.unknown` naming every valid name."""
        if name not in self._entries:
            raise self.unknown(f"unknown {self.kind} {name!r}; valid {self.plural}: {', '.join(self.names())}")
        return self._entries[name]

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self._entries)

    def origin(self, name: str) -> str:
        """The module that registered `name` (the lookup's error for an unknown one)."""
        self.lookup(name)
        return self._origins[name]

    def by_package(self, name: str) -> bool:
        """Whether `name` is registered by the package itself (not by a plugin, a test or an experiment)."""
        return name in self._entries and self._origins.get(name, "").split(".")[0] == "gspo_bench"

    def snapshot(self) -> dict[str, tuple[T, str]]:
        """name -> (entry, origin) as the registry holds them now (see `restore`)."""
        return {name: (entry, self._origins.get(name, "")) for name, entry in self._entries.items()}

    def restore(self, snapshot: dict[str, tuple[T, str]]) -> None:
        """The entries and origins of `snapshot`, and no others (a plugin that failed or tampered is undone)."""
        self._entries = {name: entry for name, (entry, _) in snapshot.items()}
        self._origins = {name: origin for name, (_, origin) in snapshot.items()}

    def copy(self) -> Registry[T]:
        """An independent registry with the same entries (a test registers into it, then drops it)."""
        twin: Registry[T] = Registry(self.kind, self.plural, self.unknown, listed=False)
        twin._entries, twin._origins = dict(self._entries), dict(self._origins)
        return twin

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __setitem__(self, name: str, entry: T) -> None:
        self._entries[name] = entry
        self._origins.setdefault(name, "(set directly)")

    def __delitem__(self, name: str) -> None:
        del self._entries[name]
        self._origins.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
