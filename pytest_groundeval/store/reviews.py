"""Human review of a stored run: a person's verdicts beside the scorer's, never in place of them.

``groundeval review RUN --case ID --verdict pass|fail [--dimension D] --reason TEXT --by NAME``
appends one :class:`~pytest_groundeval.model.Review` (who, when, what, why, and the scorer's
verdict it overrules or confirms) to ``<record>.reviews.jsonl`` beside the record
(``runs/<run_id>.json`` → ``runs/<run_id>.reviews.jsonl``). The record itself is never
written: its bytes, its scores and its summary stay the scorer's.

The file is JSON Lines, one review a line, owner-only like every file the harness writes, and
every line passes the one redaction step (``redact.py``). An append rewrites the file
atomically (its old lines and the new one to a temp file, fsync, rename) under an advisory lock
on the folder, so two reviewers never lose each other's line and a reader sees the old file
or the new one. The latest review of a thing (a case result, or one dimension of it) stands.

What a review means, everywhere it is shown or used (:func:`reviewed`):

* a review of the case sets its outcome (``passed`` / ``failed``); its metrics stay the
  scorer's (a clinician's "this answer is acceptable" says nothing about its F1);
* a review of a dimension sets that dimension's verdict, and the per-case value the score
  holds under the dimension's own key when that value is the dimension's verdict in this very
  result (1.0 passed, 0.0 failed: write's dimensions, ``grounded``); it does not change the
  case's outcome (no task rule is guessed): review the case for that;
* a case that errored or was skipped has no scorer verdict to overrule: it is refused.

Reports show reviewed verdicts beside the scorer's with who and why (``groundeval report``,
``compare``, ``export``, ``merge``); only ``groundeval compare --with-reviews`` computes its
figures (and its ``--fail-on-regression`` gate) from the reviewed verdicts.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from pydantic import ValidationError

from pytest_groundeval.model import CaseResult, Review, ReviewVerdict, RunRecord
from pytest_groundeval.store import files
from pytest_groundeval.store.files import REVIEWS_SUFFIX, StoreError
from pytest_groundeval.store.record import now_iso, write_json_atomic
from pytest_groundeval.store.redact import redact_json

SUFFIX = REVIEWS_SUFFIX
EXAMPLES = 10  # what a refusal lists of what exists


class ReviewError(ValueError):
    """A review that cannot be written or a reviews file that cannot be read (the message
    names the record or file and what exists)."""


def reviews_path(record: Path | str) -> Path:
    """The reviews file beside ``record`` (``runs/x.json`` → ``runs/x.reviews.jsonl``)."""
    record = Path(record)
    return record.with_name(record.stem + SUFFIX) if record.suffix else record.with_name(record.name + SUFFIX)


def is_reviews_file(path: Path | str) -> bool:
    return Path(path).name.endswith(SUFFIX)


# ---------------------------------------------------------------- reading
@dataclass
class CaseReviews:
    """The reviews that stand for one case result: of the case, and per dimension."""

    case: Review | None = None
    dimensions: dict[str, Review] = field(default_factory=dict)

    def all(self) -> list[Review]:
        return ([self.case] if self.case is not None else []) + list(self.dimensions.values())


@dataclass
class Reviews:
    """A record's reviews as read back: every line (in file order), those that stand per
    result, and warnings (lines of another run, left out)."""

    path: Path
    lines: list[Review] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def standing(self) -> dict[tuple, CaseReviews]:
        """Per case result (``CaseResult.result_key``), the latest review of each thing."""
        found: dict[tuple, CaseReviews] = {}
        for r in self.lines:
            entry = found.setdefault(r.result_key, CaseReviews())
            if r.dimension is None:
                entry.case = r
            else:
                entry.dimensions[r.dimension] = r
        return found

    def __len__(self) -> int:
        return len(self.lines)


def read_record(path: Path | str) -> RunRecord:
    """The run record at ``path`` (``store.read_record``); a :class:`ReviewError` for a journal
    (a run's record is what is reviewed) or anything the reader refuses."""
    try:
        return files.read_record(path)
    except StoreError as e:
        raise ReviewError(str(e)) from None


def read_reviews(record_path: Path | str, record: RunRecord) -> Reviews:
    """The reviews beside ``record_path`` of ``record`` (none when there is no file). A line
    that is not a review, or a review of this run naming a result or dimension the record does
    not hold (or another content), is a :class:`ReviewError` naming the file and line; lines of
    another run (a record written again at the same path) are left out with a warning."""
    path = reviews_path(record_path)
    found = Reviews(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return found
    except OSError as e:
        raise ReviewError(f"cannot read the reviews of {record_path} ({path}): {e.strerror or e}") from None
    results = {c.result_key: c for c in record.cases}
    other: dict[str, int] = {}
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            review = Review.model_validate_json(line)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(map(str, first["loc"])) or "<line>"
            raise ReviewError(f"{path}: line {n} is not a groundeval review ({where}: {first['msg']}); fix or "
                              "remove that line") from None
        if review.run_id != record.run_id:
            other[review.run_id] = other.get(review.run_id, 0) + 1
            continue
        case = results.get(review.result_key)
        problem = None
        if case is None:
            problem = f"reviews {_label(review)}, which {record_path} does not hold"
        elif review.content_hash != case.content_hash:
            problem = f"reviews {_label(review)} with other content ({review.content_hash}) than the record's " \
                      f"({case.content_hash})"
        elif review.dimension is not None and (case.score is None or review.dimension not in case.score.dimensions):
            problem = f"reviews dimension {review.dimension!r} of {_label(review)}, which its score does not have"
        if problem:
            raise ReviewError(f"{path}: line {n} {problem}: not a review of this record; fix or remove that line")
        found.lines.append(review)
    if other:
        found.warnings.append(
            f"{path}: {sum(other.values())} review(s) of another run ({', '.join(sorted(other))}), not of the record "
            f"{record_path} (run {record.run_id}) beside it: left out")
    return found


def load(record_path: Path | str) -> tuple[RunRecord, Reviews]:
    """The record at ``record_path`` and its reviews."""
    record = read_record(record_path)
    return record, read_reviews(record_path, record)


# ---------------------------------------------------------------- what a review changes
def verdict_of(passed: bool) -> ReviewVerdict:
    return "pass" if passed else "fail"


def reviewed(case: CaseResult, reviews: CaseReviews | None) -> CaseResult:
    """``case`` as its standing reviews say (a copy; ``case`` itself unchanged): the case's
    outcome, a dimension's verdict, and the per-case value that is that dimension's verdict
    (see the module's docstring)."""
    if reviews is None or case.score is None or not reviews.all():
        return case
    score = case.score.model_copy(deep=True)
    for name, r in reviews.dimensions.items():
        dim = score.dimensions.get(name)
        if dim is None:
            continue
        mirror = score.metrics.get(name)
        if mirror is not None and float(mirror) == (1.0 if dim.passed else 0.0):
            score.metrics[name] = 1.0 if r.verdict == "pass" else 0.0
        dim.passed = r.verdict == "pass"
    outcome = case.outcome
    if reviews.case is not None:
        r = reviews.case
        score.passed = r.verdict == "pass"
        outcome = "passed" if score.passed else "failed"
        score.reason = f"reviewed {r.verdict} by {r.by}: {r.reason} (the scorer's {r.original}: {case.score.reason})"
    return case.model_copy(update={"score": score, "outcome": outcome})


def reviewed_cases(record: RunRecord, reviews: Reviews) -> list[CaseResult]:
    """Every case result of ``record`` as its reviews say (the record unchanged)."""
    standing = reviews.standing
    return [reviewed(c, standing.get(c.result_key)) for c in record.cases]


def _label(review: Review | CaseResult) -> str:
    again = f"[r{review.repeat}]" if review.repeat is not None else ""
    return f"{review.task}:{review.case_id}{again}"


def describe(review: Review) -> str:
    """One line: what, the scorer's verdict and the reviewer's, who, when and why."""
    what = _label(review) + ("" if review.dimension is None else f" {review.dimension}")
    return f"{what}: {review.original} -> {review.verdict} by {review.by} ({review.at}): {review.reason}"


# ---------------------------------------------------------------- writing
_REPEAT = re.compile(r"^(?P<id>.*)\[r(?P<k>[0-9]+)\]$")


def find_result(record: RunRecord, record_path: Path | str, spec: str) -> CaseResult:
    """The one result ``spec`` names: ``ID``, ``TASK:ID``, either with ``[rK]`` for repeat K.
    A :class:`ReviewError` naming the record and listing what exists otherwise."""
    m = _REPEAT.match(spec)
    name, repeat = (m["id"], int(m["k"])) if m else (spec, None)
    matches = [c for c in record.cases if c.case_id == name]
    if not matches and ":" in name:
        task, _, cid = name.partition(":")
        matches = [c for c in record.cases if c.task == task and c.case_id == cid]
    if not matches:
        ids = sorted({f"{c.task}:{c.case_id}" for c in record.cases})
        shown = ", ".join(ids[:EXAMPLES]) + (f", ... ({len(ids) - EXAMPLES} more)" if len(ids) > EXAMPLES else "")
        raise ReviewError(f"{record_path} (run {record.run_id}) holds no case {name!r}; it holds {len(ids)}: "
                          f"{shown or 'none'}")
    tasks = sorted({c.task for c in matches})
    if len(tasks) > 1:
        raise ReviewError(f"{record_path}: case {name!r} is in several tasks ({', '.join(tasks)}): name one as "
                          f"TASK:ID, e.g. {tasks[0]}:{name}")
    if repeat is not None:
        found = [c for c in matches if c.repeat == repeat]
    else:
        found = matches if len(matches) == 1 and matches[0].repeat is None else []
    if not found:
        reps = sorted(c.repeat for c in matches if c.repeat is not None)
        have = (f"its results are repeats {', '.join(map(str, reps))}: name one as {name}[rK]" if reps
                else f"it was not repeated: name it as {name}")
        raise ReviewError(f"{record_path}: no result {spec!r} of {tasks[0]}:{name}; {have}")
    return found[0]


def make_review(record: RunRecord, record_path: Path | str, *, case: str, verdict: str, reason: str, by: str,
                dimension: str | None = None, at: str | None = None) -> Review:
    """The review of ``case`` (see :func:`find_result`) in ``record``, checked: a scored result, an
    existing dimension, a reason and a name."""
    if verdict not in ("pass", "fail"):
        raise ReviewError(f"--verdict {verdict!r}: give pass or fail")
    if not reason.strip() or not by.strip():
        raise ReviewError("a review says why (--reason) and who (--by): neither may be empty")
    result = find_result(record, record_path, case)
    label = _label(result)
    if result.score is None:
        kind = f" ({result.error.kind}: {result.error.message})" if result.error is not None else ""
        raise ReviewError(f"{record_path}: {label} was not scored (outcome {result.outcome}{kind}): there is no "
                          "scorer verdict to review; re-run the case (--resume) to get one")
    if dimension is not None:
        dims = result.score.dimensions
        if dimension not in dims:
            raise ReviewError(f"{record_path}: {label} has no dimension {dimension!r}; its score has "
                              + (", ".join(dims) if dims else "none (review the case without --dimension)"))
        original = verdict_of(dims[dimension].passed)
    else:
        original = verdict_of(result.score.passed)
    return Review(run_id=record.run_id, task=result.task, case_id=result.case_id, repeat=result.repeat,
                  content_hash=result.content_hash, dimension=dimension, verdict=verdict,  # type: ignore[arg-type]
                  original=original, reason=reason.strip(), by=by.strip(), at=at or now_iso())


def append(record_path: Path | str, reviews: Iterable[Review], *, replace: bool = False) -> Path:
    """Add ``reviews`` to the file beside ``record_path`` (``replace``: instead of its lines):
    under an advisory lock on the folder, the old lines and the new written to a temp file and
    renamed over it (atomic; owner-only), each line redacted. The path written."""
    path = reviews_path(record_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = b"".join(redact_json(r.model_dump_json().encode("utf-8")) + b"\n" for r in reviews)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another reviewer's append waits for ours (released on close)
        try:
            old = b"" if replace else path.read_bytes()
        except FileNotFoundError:
            old = b""
        if old and not old.endswith(b"\n"):
            old += b"\n"
        write_json_atomic(path, old + lines)
    finally:
        os.close(fd)
    return path


def review(record_path: Path | str, **kw: Any) -> Review:
    """Check and append one review of the record at ``record_path`` (``make_review``'s
    keywords); the review written. The record is read, never written."""
    record = read_record(record_path)
    read_reviews(record_path, record)  # a reviews file that cannot be read is not appended to
    r = make_review(record, record_path, **kw)
    append(record_path, [r])
    return r


# ---------------------------------------------------------------- groundeval review
def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "review", help="record a person's verdict on a case (or one of its dimensions) beside a run record",
        description="Append a human review (who, when, what, why, and the scorer's verdict) to RUN's reviews file "
        "(<record>.reviews.jsonl beside it). The record and its scores are never changed; report, compare, export "
        "and merge show reviewed verdicts beside the scorer's, and compare --with-reviews gates on them. "
        "Exit status: 0 written, 2 refused (an unknown case or dimension, an unscored case, an unreadable record).")
    p.add_argument("record", type=Path, metavar="RUN", help="the run record (runs/*.json)")
    p.add_argument("--case", required=True, metavar="ID",
                   help="the case: ID, or TASK:ID when several tasks have it; ID[rK] for repeat K under --repeat")
    p.add_argument("--verdict", required=True, choices=("pass", "fail"), help="the reviewer's verdict")
    p.add_argument("--dimension", metavar="D", help="review this dimension of the case's score (default: the case)")
    p.add_argument("--reason", required=True, metavar="TEXT", help="why (kept with the review)")
    p.add_argument("--by", required=True, metavar="NAME", help="who reviewed")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        r = review(args.record, case=args.case, verdict=args.verdict, dimension=args.dimension, reason=args.reason,
                   by=args.by)
    except (ReviewError, OSError) as e:
        msg = e.strerror if isinstance(e, OSError) and e.strerror else e
        print(f"groundeval review: {msg}", file=sys.stderr)
        return 2
    print(f"groundeval review: {describe(r)}")
    print(f"  written to {reviews_path(args.record)} (the record {args.record} is unchanged)")
    return 0
