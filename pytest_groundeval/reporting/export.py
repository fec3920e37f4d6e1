"""Run records as rows: ``groundeval export RUN... --format csv|jsonl [-o FILE]`` and
:func:`load_run` (``pytest_groundeval.load_run``) for pandas, a spreadsheet or a notebook.

One row per case result (a case under ``--repeat N`` has N rows; an errored or skipped case
has its row too), in the record's order, runs one after another. The columns
(:func:`columns`):

* ``run_id``, ``agent``, ``model`` (the case's own, else the record's), ``task``, ``case_id``,
  ``repeat`` (empty without ``--repeat``), ``outcome``, ``error_kind`` (empty unless the case
  errored), ``reason`` (the scorer's reason, the error's message or the skip reason);
* ``metric.<name>``: every per-case metric, as the score holds it. Which columns: the per-case
  values the record's declared metrics are built from (``summary.<task>.specs``: a rate's,
  mean's or count's ``of``, a prf figure's counts), in declaration order, then any other per-case
  metric the scores hold. Empty where the case has no score (an error is 0 in the summary's
  denominators, but the export gives what the record holds) or its score no such value;
* ``dimension.<name>``: each scoring dimension's verdict (true / false);
* ``input_tokens``, ``output_tokens``, ``cache_creation_input_tokens``,
  ``cache_read_input_tokens``, ``cost_usd`` (empty: unpriced or not reported), ``duration_s``;
* the reviews (``groundeval review``, ``store/reviews.py``) that stand for the result:
  ``reviewed_outcome`` (the case's reviewed outcome; empty: not reviewed),
  ``reviewed.<dimension>`` (a reviewed dimension's verdict; a column only for dimensions some
  review names), and ``reviewed_by``, ``reviewed_at``, ``review_reason`` (every standing review
  of the result, ``; ``-joined, the case's first). The scorer's columns are never changed.

CSV: a header line, then one line per row; empty for none, ``true`` / ``false`` for a
verdict. A text cell starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets
a leading ``'`` (a spreadsheet would run it as a formula: agents write these strings). JSONL:
one JSON object per row with every column (null for none), as :meth:`Run.to_rows` gives them.

Records only (a journal: finish the run with ``--resume``); read through ``store.read``.
Exit status: 0 written, 2 a record could not be read or the file not written.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import orjson
from pydantic import PrivateAttr

from pytest_groundeval.model import CaseResult, RunRecord
from pytest_groundeval.reporting.terminal import plural
from pytest_groundeval.store.reviews import CaseReviews, ReviewError, Reviews, read_record, read_reviews

HEAD = ("run_id", "agent", "model", "task", "case_id", "repeat", "outcome", "error_kind", "reason")
USAGE = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
TAIL = (*USAGE, "cost_usd", "duration_s")
REVIEW = ("reviewed_outcome", "reviewed_by", "reviewed_at", "review_reason")
FORMULA = ("=", "+", "-", "@", "\t", "\r")


class ExportError(Exception):
    """A run that cannot be exported (the message names the file and what to do)."""


class Run(RunRecord):
    """A run record as :func:`load_run` gives it: the typed :class:`RunRecord` (every field,
    validated as ``store.read`` reads it), with the reviews beside it (``reviews``) and its rows
    (:meth:`to_rows`, :meth:`to_dataframe`). Nothing of the record is changed by its reviews."""

    _reviews: Reviews | None = PrivateAttr(default=None)
    _path: Path | None = PrivateAttr(default=None)

    @property
    def path(self) -> Path | None:
        return self._path

    @property
    def reviews(self) -> Reviews | None:
        """The reviews beside the record (``store/reviews.py``): every line, and those that stand."""
        return self._reviews

    def to_rows(self) -> list[dict[str, Any]]:
        """One dict per case result, the columns of ``groundeval export`` (:func:`columns`)."""
        return list(rows(self, self._reviews, columns([(self, self._reviews)])))

    def to_dataframe(self) -> Any:
        """The rows as a ``pandas.DataFrame`` (pandas is not a dependency of groundeval: an
        ``ImportError`` saying how to install it when it is absent)."""
        return to_dataframe([self])


def load_run(path: Path | str, *, verify: bool = False, trust_stored: bool = False) -> Run:
    """The run record at ``path`` (``runs/<run_id>.json``), typed, with its reviews::

        import pytest_groundeval as ge
        run = ge.load_run("runs/20261204T081500Z-1a2b3c.json")
        run.summary["write"].value("safety"), run.cases[0].score.metrics
        run.to_rows()          # one dict per case result, as groundeval export writes them
        run.to_dataframe()     # the same as a pandas DataFrame (pandas installed separately)

    A :class:`ExportError` (a ``ValueError``) names the file and what to do when it is not a
    record this groundeval reads (a journal, another format, not valid) or its reviews file is
    not valid. ``verify``: nothing of it taken as read, as ``groundeval export`` reads it (each
    case re-derived from its stored answer and its data, the summary and gate computed again:
    ``store/verify.py``; a record that disagrees is refused unless ``trust_stored``)."""
    from pytest_groundeval.store import StoreError
    from pytest_groundeval.store.verify import to_stderr, verified

    path = Path(path)
    try:
        record = read_record(path)
        if verify:
            record = verified(record, str(path), trust_stored=trust_stored, warn=to_stderr)
        reviews = read_reviews(path, record)
    except (ReviewError, StoreError) as e:
        raise ExportError(str(e)) from None
    run = Run.model_construct(_fields_set=record.model_fields_set, **dict(record))
    run._reviews, run._path = reviews, path
    return run


# ---------------------------------------------------------------- columns and rows
def _metric_names(record: RunRecord) -> list[str]:
    """The record's per-case metrics: those its declared specs are built from (declaration
    order), then the others its scores hold (in order of appearance)."""
    names: dict[str, None] = {}
    for summary in record.summary.values():
        for spec in summary.specs.values():
            if spec.source != "score":
                continue  # repeats figures are per case, not per result
            for name in (spec.counts or []) if spec.kind == "prf" else [spec.per_case] if spec.kind != "custom" else []:
                names.setdefault(name, None)
    for c in record.cases:
        for name in (c.score.metrics if c.score is not None else {}):
            names.setdefault(name, None)
    return list(names)


def _dimension_names(record: RunRecord) -> list[str]:
    names: dict[str, None] = {}
    for c in record.cases:
        for name in (c.score.dimensions if c.score is not None else {}):
            names.setdefault(name, None)
    return list(names)


def columns(runs: Iterable[tuple[RunRecord, Reviews | None]]) -> list[str]:
    """The columns of these runs' rows (several runs: the union, in order of appearance)."""
    metrics: dict[str, None] = {}
    dims: dict[str, None] = {}
    reviewed: dict[str, None] = {}
    for record, reviews in runs:
        metrics.update(dict.fromkeys(_metric_names(record)))
        dims.update(dict.fromkeys(_dimension_names(record)))
        for r in reviews.lines if reviews is not None else []:
            if r.dimension is not None:
                reviewed.setdefault(r.dimension, None)
    return [*HEAD, *(f"metric.{m}" for m in metrics), *(f"dimension.{d}" for d in dims), *TAIL,
            REVIEW[0], *(f"reviewed.{d}" for d in reviewed), *REVIEW[1:]]


def _outcome(passed: bool) -> str:
    return "passed" if passed else "failed"


def row(record: RunRecord, case: CaseResult, standing: CaseReviews | None) -> dict[str, Any]:
    """One case result's cells (the columns it has values for)."""
    score = case.score
    usage = case.usage
    out: dict[str, Any] = {
        "run_id": record.run_id, "agent": case.agent or record.agent, "model": case.model or record.model,
        "task": case.task, "case_id": case.case_id, "repeat": case.repeat, "outcome": case.outcome,
        "error_kind": case.error_kind, "reason": case.reason or None,
        "cost_usd": case.cost_usd, "duration_s": case.duration_s,
    }
    for key in USAGE:
        out[key] = getattr(usage, key) if usage is not None else None
    if score is not None:
        out.update({f"metric.{k}": v for k, v in score.metrics.items()})
        out.update({f"dimension.{k}": d.passed for k, d in score.dimensions.items()})
    if standing is not None and standing.all():
        if standing.case is not None:
            out["reviewed_outcome"] = _outcome(standing.case.verdict == "pass")
        for name, r in standing.dimensions.items():
            out[f"reviewed.{name}"] = r.verdict == "pass"
        every = standing.all()
        out["reviewed_by"] = "; ".join(r.by for r in every)
        out["reviewed_at"] = "; ".join(r.at for r in every)
        out["review_reason"] = "; ".join(
            (r.reason if r.dimension is None else f"{r.dimension}: {r.reason}") for r in every)
    return out


def rows(record: RunRecord, reviews: Reviews | None, cols: Sequence[str]) -> Iterator[dict[str, Any]]:
    """Every case result of ``record`` as a dict over ``cols`` (None where it has no value)."""
    standing = reviews.standing if reviews is not None else {}
    for case in record.cases:
        cells = row(record, case, standing.get(case.result_key))
        yield {c: cells.get(c) for c in cols}


def to_dataframe(runs: Sequence[Run]) -> Any:
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("to_dataframe() needs pandas, which groundeval does not install: `pip install pandas` "
                          "(or `uv add pandas`); to_rows() gives the same rows as dicts without it") from None
    cols = columns([(r, r.reviews) for r in runs])
    return pd.DataFrame([x for r in runs for x in rows(r, r.reviews, cols)], columns=cols)


# ---------------------------------------------------------------- writing
def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.startswith(FORMULA):
        return "'" + value
    return value


def render_csv(cols: Sequence[str], data: Iterable[dict[str, Any]]) -> Iterator[str]:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    yield buf.getvalue()
    for r in data:
        buf.seek(0)
        buf.truncate()
        w.writerow([_csv_cell(r[c]) for c in cols])
        yield buf.getvalue()


def render_jsonl(data: Iterable[dict[str, Any]]) -> Iterator[str]:
    for r in data:
        yield orjson.dumps(r).decode("utf-8") + "\n"


def export(paths: Sequence[Path], fmt: str, *, trust_stored: bool = False) -> tuple[Iterator[str], list[str], int]:
    """The text of the export of ``paths`` (in pieces), the reviews' warnings, and its rows
    (each record verified: :func:`load_run`)."""
    loaded = [load_run(p, verify=True, trust_stored=trust_stored) for p in paths]
    cols = columns([(r, r.reviews) for r in loaded])
    data = (x for r in loaded for x in rows(r, r.reviews, cols))
    text = render_csv(cols, data) if fmt == "csv" else render_jsonl(data)
    warnings = [w for r in loaded for w in (r.reviews.warnings if r.reviews is not None else [])]
    return text, warnings, sum(len(r.cases) for r in loaded)


# ---------------------------------------------------------------- groundeval export
def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "export", help="write run records as rows (one per case result): CSV or JSON Lines",
        description="Write one row per case result of each RUN (run id, agent, model, task, case id, repeat, "
        "outcome, error kind, every per-case metric and dimension, tokens, cost, and the reviewer's verdicts "
        "beside the scorer's) as CSV or JSON Lines. Each stored case is re-scored from its stored answer and its data "
        "first (a record whose stored results disagree is refused, unless --trust-stored). Exit status: 0 written, "
        "2 a record could not be read or vouched for, or the output not written.")
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="run records (runs/*.json)")
    p.add_argument("--format", choices=("csv", "jsonl"), default="csv", help="csv (default) or jsonl")
    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="where to write (default: standard output)")
    from pytest_groundeval.store.verify import TRUST_HELP

    p.add_argument("--trust-stored", action="store_true", help=TRUST_HELP)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.output is not None and any(args.output.resolve() == p.resolve() for p in args.runs):
        print(f"groundeval export: {args.output} is a record given to read; name another file with -o",
              file=sys.stderr)
        return 2
    try:
        text, warnings, n = export(args.runs, args.format, trust_stored=args.trust_stored)
    except ExportError as e:
        print(f"groundeval export: {e}", file=sys.stderr)
        return 2
    for w in warnings:
        print(f"groundeval export: warning: {w}", file=sys.stderr)
    if args.output is None:
        try:
            for piece in text:
                sys.stdout.write(piece)
            sys.stdout.flush()
        except BrokenPipeError:  # `groundeval export RUN | head`: the reader has what it wanted
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    from pytest_groundeval.store.record import write_json_atomic

    try:  # owner-only and atomic, like every file the harness writes (it holds the cases' data)
        write_json_atomic(args.output, (piece.encode("utf-8", "backslashreplace") for piece in text))
    except OSError as e:
        print(f"groundeval export: could not write {args.output}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"groundeval export: {plural(n, 'row')} to {args.output}", file=sys.stderr)
    return 0
