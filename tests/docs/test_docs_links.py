"""The README is a front door (at most 150 lines) and every relative link or image in it and in
``docs/`` points at a file that exists (``mkdocs build --strict`` checks the docs' links between
pages; this also covers the README, which the site does not build, and links out of ``docs/``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 150
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def links(text: str) -> list[str]:
    """Link and image targets outside fenced blocks and code spans."""
    out, fence = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
            continue
        if not fence:
            out += LINK.findall(re.sub(r"`[^`]*`", "", line))
    return out


def broken(path: Path, root: Path = ROOT) -> list[str]:
    bad = []
    for target in links(path.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor in the same page
        if not (path.parent / target.split("#", 1)[0]).exists():
            bad.append(f"{path.relative_to(root)}: {target}")
    return bad


def test_the_readme_is_at_most_150_lines():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= README_MAX_LINES


def test_every_relative_link_in_the_readme_and_the_docs_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    assert [b for p in pages for b in broken(p)] == []
    assert len(links((ROOT / "README.md").read_text(encoding="utf-8"))) > 30


def test_the_link_reader_skips_code_and_finds_images(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("![shot](a.png) [x](b.md#top) `[no](c.md)`\n```\n[no](d.md)\n```\n[u](https://x.org) [s](#here)\n")
    (tmp_path / "a.png").write_bytes(b"")
    assert links(page.read_text()) == ["a.png", "b.md#top", "https://x.org", "#here"]
    assert broken(page, tmp_path) == ["p.md: b.md#top"]
