"""The README is a front door and docs/ holds the rest: every relative link of README.md and docs/*.md leads to a
file that exists and, when it names an anchor, to a heading of that file (as GitHub makes anchors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file: lower case, punctuation dropped, spaces to
    hyphens, a repeated one numbered."""
    seen: dict[str, int] = {}
    found = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        heading = re.match(r"^#{1,6} (.+?)\s*#*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text())
    return [target for target in LINK.findall(text) if not re.match(r"^[a-z]+:", target)]


def test_the_readme_is_a_front_door_under_300_lines_and_names_no_spec():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 300
    for part in ("## Two commands", "## The demo tour", "## A first API call", "docs/overview.png"):
        assert part in readme
    for page in PAGES:
        assert not re.search(r"\bSPEC\b", page.read_text()), (
            f"{page.name} refers to a SPEC the repository lacks"
        )


@pytest.mark.parametrize("page", PAGES, ids=[page.relative_to(ROOT).as_posix() for page in PAGES])
def test_every_relative_link_resolves_to_a_file_and_heading(page):
    broken = []
    for target in links(page):
        file_part, _, anchor = target.partition("#")
        destination = (page.parent / file_part).resolve() if file_part else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target}: no heading #{anchor} in {destination.relative_to(ROOT)}")
    assert broken == []


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## A job's life: `STOPPING`\n")
    page.write_text("[ok](other.md#a-jobs-life-stopping) [gone](missing.md) [no](other.md#nowhere)\n")
    assert anchors(tmp_path / "other.md") == {"other", "a-jobs-life-stopping"}
    assert links(page) == ["other.md#a-jobs-life-stopping", "missing.md", "other.md#nowhere"]
