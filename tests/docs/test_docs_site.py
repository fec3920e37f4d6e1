"""The docs site builds with ``mkdocs build --strict`` (a broken link, a missing nav page or an
API reference that does not resolve fails it), and its reference pages are generated from the
code: every pytest option and every ``groundeval`` subcommand and argument is on them."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("mkdocs", reason="mkdocs is in the dev dependency group (uv sync installs it)")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out


def _text(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))


def test_the_site_builds_strict_and_every_nav_page_is_rendered(site):
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for n in node:
                yield from pages(n)
        elif isinstance(node, dict):
            for n in node.values():
                yield from pages(n)

    listed = list(pages(nav))
    assert len(listed) == len(set(listed))
    for md in listed:
        built = site / ("index.html" if md == "index.md" else md.removesuffix(".md").removesuffix("/index") + "/index.html")
        assert built.is_file(), md
    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert on_disk == set(listed), "every page is in the nav, and every nav entry is a page"


def test_the_options_page_lists_every_option_the_plugin_registers(site):
    from pytest_groundeval.pytest.options import add_options
    from pytest_groundeval.tasks import task_infos

    names: list[str] = []

    class Parser:
        def getgroup(self, *a):
            return self

        def addoption(self, *flags, **kw):
            names.extend(flags)

        def addini(self, name, *a, **kw):
            names.append(name)

    add_options(Parser(), task_infos())
    text = _text(site / "reference" / "options" / "index.html")
    assert "<!-- generated" not in (site / "reference" / "options" / "index.html").read_text()
    assert len(names) > 30 and [n for n in names if n not in text] == []


def test_the_cli_page_lists_every_subcommand_and_argument(site):
    from pytest_groundeval.cli import subcommands

    text = _text(site / "reference" / "cli" / "index.html")
    missing = [f"{name} {flag}" for name, parser in subcommands().items()
               for action in parser._actions for flag in action.option_strings or [action.metavar or action.dest]
               if flag not in ("-h", "--help") and flag not in text]
    assert f"groundeval {'merge'}" in text and missing == []


def test_the_api_reference_documents_task_agent_and_the_record(site):
    text = _text(site / "reference" / "api" / "index.html")
    for name in ("Task", "Agent", "RunRecord", "CaseResult", "MetricSpec", "discover", "summarize"):
        assert re.search(rf"\b{name}\b", text), name
