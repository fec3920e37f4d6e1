"""Every section of the old single-file README lives in exactly one docs page: the committed map
(``docs/_old_readme_sections.json``) names, for every heading of that README, the page that holds
it and its heading there (the same, or an explicit rename); that heading is in that page and in
no other."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MAP = json.loads((DOCS / "_old_readme_sections.json").read_text(encoding="utf-8"))


def headings(text: str) -> list[str]:
    """Markdown ATX headings outside fenced blocks (a ``# comment`` in a shell block is none)."""
    out, fence = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
        elif not fence and (m := re.match(r"^#{1,6} (.+?)\s*#*\s*$", line)):
            out.append(m.group(1))
    return out


def _pages() -> dict[str, list[str]]:
    return {p.relative_to(DOCS).as_posix(): headings(p.read_text(encoding="utf-8")) for p in DOCS.rglob("*.md")}


def test_the_map_covers_every_heading_of_the_old_readme():
    commit = MAP["old_readme_commit"]
    proc = subprocess.run(["git", "show", f"{commit}:README.md"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"the old README's commit {commit} is not in this clone's history: {proc.stderr.strip()}")
    old = headings(proc.stdout)
    assert len(old) == len(set(old)) and len(old) > 20
    assert list(MAP["sections"]) == old


def test_each_old_section_is_under_its_heading_in_exactly_one_page():
    pages = _pages()
    wrong = []
    for old, entry in MAP["sections"].items():
        page, heading = entry["page"], entry["heading"]
        if page not in pages:
            wrong.append(f"{old!r}: no page docs/{page}")
            continue
        holding = sorted(p for p, hs in pages.items() if heading in hs)
        if holding != [page]:
            wrong.append(f"{old!r}: heading {heading!r} is in {holding or 'no page'}, not only in {page}")
    assert wrong == []


def test_the_heading_parser_ignores_comments_in_code_blocks():
    assert headings("# a\n```bash\n# not a heading\n```\n## b ##\n") == ["a", "b"]
