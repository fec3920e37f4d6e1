"""MkDocs hook: the options and CLI reference pages, generated from the code at build time.

``docs/reference/options.md`` and ``docs/reference/cli.md`` hold a marker line
(``<!-- generated: pytest-options -->``, ``<!-- generated: cli -->``) that this hook replaces
with tables built from the plugin's own option declarations (``pytest/options.py``'s
``add_options``, fed the registered tasks) and the ``groundeval`` command's argparse parsers
(``cli.subcommands()``). Nothing is copied by hand, so the pages cannot drift from the code.
"""

from __future__ import annotations

import argparse
from typing import Any

MARKERS = {
    "<!-- generated: pytest-options -->": "pytest_options_markdown",
    "<!-- generated: cli -->": "cli_markdown",
}


class _Recorder:
    """Stands in for pytest's ``Parser``: records what ``add_options`` registers."""

    def __init__(self) -> None:
        self.options: list[tuple[tuple[str, ...], dict[str, Any]]] = []
        self.inis: list[tuple[str, str, dict[str, Any]]] = []

    def getgroup(self, name: str, description: str = "") -> "_Recorder":
        return self

    def addoption(self, *names: str, **kw: Any) -> None:
        self.options.append((names, kw))

    def addini(self, name: str, help: str, **kw: Any) -> None:
        self.inis.append((name, help, kw))


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    return f"`{text}`" if "`" not in text else f"`` {text} ``"


def _default(value: Any) -> str:
    if value is None or value == [] or value == "":
        return ""
    return _code(str(value))


def pytest_options_markdown() -> str:
    from pytest_groundeval.pytest.options import add_options
    from pytest_groundeval.tasks import task_infos

    rec = _Recorder()
    add_options(rec, task_infos())
    rows = ["| option | default | what it does |", "|---|---|---|"]
    for names, kw in rec.options:
        metavar = kw.get("metavar") or ("{" + ",".join(kw["choices"]) + "}" if kw.get("choices") else None)
        flag = ", ".join(names) + (f" {metavar}" if metavar and kw.get("action") != "store_true" else "")
        default = "" if kw.get("action") == "store_true" else _default(kw.get("default"))
        rows.append(f"| {_code(flag)} | {default} | {_cell(kw.get('help', ''))} |")
    inis = ["| ini key | type | what it sets |", "|---|---|---|"]
    for name, help_, kw in rec.inis:
        inis.append(f"| {_code(name)} | {kw.get('type') or 'string'} | {_cell(help_)} |")
    return "\n".join(["## Command-line options", "", *rows, "", "## ini keys", "", *inis, ""])


def _usage(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_usage().split()).removeprefix("usage: ")


def _arguments(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| argument | default | what it does |", "|---|---|---|"]
    for action in parser._actions:  # argparse offers no public walk over a parser's arguments
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        name = ", ".join(action.option_strings) or (action.metavar or action.dest)
        if action.option_strings and action.nargs != 0:
            name += f" {action.metavar or action.dest.upper()}"
        default = action.default
        shown = "" if default in (None, False, [], argparse.SUPPRESS) or not action.option_strings else _code(str(default))
        if action.choices:
            shown = (shown + " " if shown else "") + "one of " + ", ".join(_code(str(c)) for c in action.choices)
        rows.append(f"| {_code(name)} | {shown} | {_cell(action.help or '')} |")
    return rows


def cli_markdown() -> str:
    from pytest_groundeval.cli import build_parser, subcommands

    out = [f"`{_usage(build_parser())}`", ""]
    for name, parser in sorted(subcommands().items()):
        out += [f"## groundeval {name}", "", _cell(parser.description or ""), "", f"`{_usage(parser)}`", "",
                *_arguments(parser), ""]
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    for marker, fn in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, globals()[fn]())
    return markdown
