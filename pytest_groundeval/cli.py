"""The ``groundeval`` command (console script; also ``python -m pytest_groundeval.cli``).

One subcommand per module: each module in :data:`SUBCOMMANDS` defines
``add_parser(subparsers)``, which adds its subcommand and sets ``run`` (``args -> exit
status``) as its default. A new subcommand is one module and one line here.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

SUBCOMMANDS = (
    "pytest_groundeval.pytest.command",  # groundeval run [--task T] [--agent A] [--model M] [--limit N] ... (pytest)
    "pytest_groundeval.store.merge",  # groundeval merge SHARD... -o RUN.json
    "pytest_groundeval.reporting.html",  # groundeval report RUN [or BASE NEW] -o REPORT.html
    "pytest_groundeval.reporting.compare",  # groundeval compare BASE NEW [--format markdown] [--fail-on-regression]
    "pytest_groundeval.reporting.export",  # groundeval export RUN... [--format csv|jsonl] [-o FILE]
    "pytest_groundeval.store.reviews",  # groundeval review RUN --case ID --verdict pass|fail --reason TEXT --by NAME
    "pytest_groundeval.reporting.history",  # groundeval runs DIR_OR_RECORD...; report DIR (after html: extends it)
)


def _build() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(
        prog="groundeval", description="groundeval: run the bundled evals (groundeval run, a shortcut for the "
        "pytest run) and the tools for run records")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMANDS:
        importlib.import_module(module).add_parser(sub)
    return parser, sub.choices


def build_parser() -> argparse.ArgumentParser:
    return _build()[0]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    """The registered subcommands, by name, with their parsers."""
    return dict(_build()[1])


def main(argv: Sequence[str] | None = None) -> int:
    if not (sys.argv[1:] if argv is None else list(argv)):  # bare `groundeval`: what to run
        from pytest_groundeval.pytest.command import GUIDE

        print(GUIDE, file=sys.stderr)
        return 2
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2): an exit status, not an exception
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
