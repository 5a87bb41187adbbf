"""The README is the entry (short, the two commands first) and docs/ the reference: every relative
link in them reaches a file (and a heading, where it names one), and the README links every page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)


def prose(text: str) -> str:
    """The markdown without fenced blocks and code spans, where a `[x](y)` is no link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(text: str) -> list[str]:
    return LINK.findall(prose(text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, code ticks and punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a markdown file's headings (a repeated heading gets -1, -2, ... as on GitHub)."""
    counts: dict[str, int] = {}
    names = set()
    for line in prose(page.read_text()).splitlines():
        match = re.match(r"#{1,6}\s+(.+?)\s*#*\s*$", line)
        if match:
            base = slug(match.group(1))
            names.add(f"{base}-{counts[base]}" if base in counts else base)
            counts[base] = counts.get(base, 0) + 1
    return names


def broken(page: Path) -> list[str]:
    """The relative links of `page` that reach no file, or no heading of the file they name."""
    bad = []
    for target in links(page.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:: not checked here
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target} (no such file)")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            bad.append(f"{target} (no heading '{anchor}' in {dest.name})")
    return bad


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines; move reference text to docs/"


def test_readme_opens_with_the_two_commands():
    text = README.read_text()
    first = re.search(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)
    assert first is not None and first.group(1) == "bash"
    assert text[:first.start()].strip() == "# gspo-bench", "only the title comes before the commands"
    commands = [line.split("#")[0].strip() for line in first.group(2).splitlines()]
    assert commands == ["make quickstart", "make test"]


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    assert broken(page) == []


def test_readme_links_every_docs_page():
    assert len(PAGES) >= 8
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(README.read_text())}
    assert [p.name for p in PAGES if p.resolve() not in linked] == []


def test_the_link_check_sees_a_broken_link_and_a_missing_heading(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n\n## Many GPUs (one node)\n\nSee [b](b.md#Nope) and `[c](c.md)`.\n")
    (tmp_path / "b.md").write_text("# B\n\n```\n# not a heading\n```\n[a](a.md#many-gpus-one-node) [gone](gone.md)\n")
    assert broken(tmp_path / "a.md") == ["b.md#Nope (no heading 'Nope' in b.md)"]
    assert broken(tmp_path / "b.md") == ["gone.md (no such file)"]
    assert anchors(tmp_path / "b.md") == {"b"}


def where_to_add_what() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    return text.split("## Where to add what")[1].split("\n## ")[0]


def missing_paths(text: str) -> list[str]:
    """The repository paths named in code spans of `text` (`tests/test_x.py::test_name` too) that are not
    there; a path with a placeholder (`<name>`) is a pattern, not checked."""
    gone = []
    for span in re.findall(r"`([^`\s]+)`", text):
        path, _, name = span.partition("::")
        if "<" in path or not re.match(r"(gspo_bench|analysis|tests|docs|experiments)/", path):
            continue
        target = ROOT / path
        if not target.exists():
            gone.append(span)
        elif name and not re.search(rf"^def {re.escape(name)}\(", target.read_text(), re.M):
            gone.append(span)
    return gone


def test_the_where_to_add_what_table_names_paths_and_tests_that_exist():
    """docs/architecture.md's table of what to touch to add an objective, a task, a reward, an engine, a
    figure, a report section or a statistic: a file renamed or a test removed fails here."""
    text = where_to_add_what()
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == ["a built-in objective", "a task", "a reward", "a rollout engine", "a figure",
                        "a report section", "a statistic"]
    assert len(re.findall(r"`(?:gspo_bench|analysis|tests)/[^`]+`", text)) > 40
    assert missing_paths(text) == []
    assert missing_paths("`tests/test_tasks.py::test_gone` `analysis/stats/gone.py` `gspo_bench/tasks/<name>.py`") == [
        "tests/test_tasks.py::test_gone", "analysis/stats/gone.py"]
