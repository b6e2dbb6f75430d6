"""The documentation holds together: every relative link of README.md, docs/ and
benchmarks/README.md reaches a file of the repository, and every #anchor a heading
of its page (as GitHub names them); the README stays a front door."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from seckill_local.checkout import ROOT

PAGES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def prose(page: Path) -> str:
    """The page without its code blocks, whose brackets are not links."""
    return FENCE.sub("", page.read_text(encoding="utf-8"))


def anchors(page: Path) -> set[str]:
    """The ids GitHub gives the page's headings: lowercased, punctuation dropped,
    spaces to hyphens, a repeated one suffixed -1, -2..."""
    seen: dict[str, int] = {}
    ids = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", prose(page), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        ids.add(slug if count == 0 else f"{slug}-{count}")
    return ids


def links(page: Path) -> list[str]:
    return [target for target in LINK.findall(prose(page)) if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_the_checker_sees_a_broken_link_and_a_missing_anchor(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# A page: `its title`\n\n[ok](#a-page-its-title) [gone](missing.md) [no such](#nowhere)\n"
        "```\n[in code](not-a-link.md)\n```\n",
        encoding="utf-8",
    )
    assert links(page) == ["#a-page-its-title", "missing.md", "#nowhere"]
    assert anchors(page) == {"a-page-its-title"}


def test_the_readme_is_a_front_door() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme) < 12_000, "the manual belongs in docs/; the README links to it"
    # .ci/run runs the README's test command.
    assert "make test" in readme
