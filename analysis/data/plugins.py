"""Which of a run's pieces came from plugins (provenance.json's `plugins`: each plugin's name, path,
sha256 and the names it registered), for the report's provenance table and for `reproduce`."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plugin_records(prov: dict[str, Any]) -> list[dict[str, Any]]:
    """The plugins a run recorded (none for a run without, or from before plugins)."""
    records = prov.get("plugins")
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []


def plugin_of(objective: str | None, prov: dict[str, Any]) -> str:
    """The file name of the plugin that registered `objective` for this run, "" for a built-in one."""
    return next((Path(str(r.get("path", r.get("name", "")))).name for r in plugin_records(prov)
                 if f"objective:{objective}" in (r.get("registered") or [])), "")


def plugin_difference(reference: dict[str, Any], fresh: dict[str, Any]) -> str:
    """"plugin NAME: ..." for the first plugin (matched by file name) that differs between two runs'
    provenance, "" where they ran the same plugin files."""
    def by_file(prov: dict[str, Any]) -> dict[str, str]:
        return {Path(str(r.get("path", ""))).name: str(r.get("sha256")) for r in plugin_records(prov)}

    ref, new = by_file(reference), by_file(fresh)
    for name in sorted(set(ref) | set(new)):
        if name not in new or name not in ref:
            return f"plugin {name}: only in {'the reference' if name in ref else 'the fresh run'}"
        if ref[name] != new[name]:
            return f"plugin {name} differs: sha256 {ref[name][:12]} in the reference, {new[name][:12]} in the fresh run"
    return ""
