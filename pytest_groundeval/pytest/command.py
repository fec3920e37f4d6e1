"""``groundeval run``: the seed's command, as a shortcut for the pytest run of the bundled suites.

``groundeval run --task write --model M --limit 2 --data-dir D --out-dir O`` runs pytest (in
this process, ``pytest.main``) on the bundled suites with the equivalent options, so the
record, the summary, the HTML report and the exit status are those of that pytest run:

=====================  ===========================================================
``groundeval run``      ``pytest <the bundled suites> --rootdir <the current folder>``
``--task T`` (repeat)   ``-m "T or ..."`` (default: every bundled suite)
``--agent A``           ``--agent A``
``--model M``           ``--model M`` (and ``--agent claude`` when no ``--agent``: the seed's
                        ``--model`` was a Claude model id)
``--limit N``           ``--groundeval-limit N`` (the first N cases of each task)
``--data-dir D``        one task: that task's own cases option (``Task.source.flag``); several:
                        ``D`` laid out as the bundled data, each task's cases in ``D/<its
                        default folder>`` (``Task.source.default``)
``--out-dir O``         ``--groundeval-runs-dir O`` (the record and its HTML report)
``-- ARGS``             passed to pytest as they are (``-- -n 2 -q``)
=====================  ===========================================================

The printed pytest command line says what ran. The bundled suites are the installed package's
``pytest_groundeval/suites`` (a wheel), or the repository's ``evals/`` (a source checkout).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from importlib import resources
from pathlib import Path
from typing import Any

SUITES = "suites"


def suites_dir() -> Path:
    """The bundled suites' folder: the package's ``suites`` (a wheel), else the checkout's ``evals``."""
    packaged = Path(str(resources.files("pytest_groundeval") / SUITES))
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "evals").is_dir() and (checkout / "pyproject.toml").is_file():
        return checkout / "evals"
    raise FileNotFoundError(f"groundeval's bundled suites are missing ({packaged}): reinstall groundeval")


def _tasks() -> dict[str, Any]:
    from pytest_groundeval.tasks import task_infos

    return task_infos()


def pytest_args(args: argparse.Namespace, tasks: dict[str, Any] | None = None) -> list[str]:
    """The pytest command line (arguments after ``pytest``) of a ``groundeval run``."""
    tasks = _tasks() if tasks is None else tasks
    out = [str(suites_dir()), "--rootdir", str(Path.cwd())]
    chosen = list(dict.fromkeys(args.task or []))
    if chosen:
        out += ["-m", " or ".join(chosen)]
    agent = args.agent or ("claude" if args.model else None)
    if agent:
        out.append(f"--agent={agent}")
    if args.model:
        out += ["--model", args.model]
    if args.limit is not None:
        out += ["--groundeval-limit", str(args.limit)]
    if args.data_dir is not None:
        data = Path(args.data_dir).absolute()
        for name in chosen or list(tasks):
            source = tasks[name].source
            out += [source.flag, str(data if len(chosen) == 1 else data / source.default)]
    if args.out_dir is not None:
        out += ["--groundeval-runs-dir", str(Path(args.out_dir).absolute())]
    extra = list(args.pytest_args or [])
    return out + (extra[1:] if extra[:1] == ["--"] else extra)


def run(args: argparse.Namespace) -> int:
    import pytest

    argv = pytest_args(args)
    print("groundeval run: pytest " + " ".join(shlex.quote(a) for a in argv), file=sys.stderr, flush=True)
    return int(pytest.main(argv))


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be 1 or more")
    return n


def add_parser(sub: Any) -> None:
    tasks = list(_tasks())
    p = sub.add_parser(
        "run", help="run the bundled eval suites (a shortcut for the pytest run; same record and summary)",
        description="Run groundeval's bundled eval suites: pytest on them with the equivalent options (printed "
        "first), so the record, the summary and the exit status are pytest's. Anything after -- goes to pytest.")
    p.add_argument("--task", action="append", choices=tasks, metavar="TASK",
                   help=f"a task to run, repeatable ({', '.join(tasks)}; default: all)")
    p.add_argument("--agent", metavar="NAME", help="the agent (default baseline, offline; see pytest --help)")
    p.add_argument("--model", metavar="MODEL", help="the model id (without --agent: --agent claude)")
    p.add_argument("--limit", type=_positive, metavar="N", help="only the first N cases of each task")
    p.add_argument("--data-dir", metavar="DIR", help="the cases: with one --task, its cases' folder or file; "
                   "else a folder laid out as the bundled data (each task's cases in its default folder's name)")
    p.add_argument("--out-dir", metavar="DIR", help="where the run record and its HTML report go "
                   "(default .groundeval/runs)")
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST_ARGS",
                   help="more pytest options, after --")
    p.set_defaults(run=run)


GUIDE = """\
groundeval: evals for healthcare AI agents, run with pytest. What to run:

  groundeval run                      the bundled suites, offline baseline agent
  groundeval run --task write         one task (extraction, write, reconciliation, letter, labs, orders)
  groundeval run --agent claude --model claude-opus-4-8 --limit 5
  pytest evals                        the same as pytest (a source checkout; installed:
                                      pytest --pyargs pytest_groundeval.suites)

Records: groundeval runs | report | compare | merge | export | review (groundeval COMMAND --help)."""


__all__ = ["GUIDE", "add_parser", "pytest_args", "run", "suites_dir"]
