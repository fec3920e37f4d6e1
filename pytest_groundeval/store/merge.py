"""``groundeval merge SHARD... -o RUN.json``: the records of a sharded run
(``--groundeval-shard K/N``, ``shard.py``) made into the one record the unsharded run writes.

The cases are the shards' cases as recorded (byte for byte, in case-id order); the summary,
usage, budget and gate are computed again from them by the functions the reporter uses
(``record.summarize``, ``usage.total_usage`` / ``budget_record``, ``gate.run_gate``), so the
merged record equals the unsharded one in cases, summary and gate (``record.comparable``).

It refuses (exit 2, naming the files) shards that are not one run's: another record format,
a record that is not a shard, a journal in place of a record, different agents, models,
commits, package versions, options or selections, different shard counts or case sets, a
shard given twice, a shard missing (unless the others account for every selected case: a
shard that held no case writes no record), and a case in a record of a shard it does not
belong to (which is also how two records of the same case are caught). A shard that was cut
short is merged, and makes the merged run cut short with its reason: the gate fails, as it
does for an unsharded run cut short.

Human reviews beside the shards (``groundeval review``: ``<shard>.reviews.jsonl``) are carried
to ``<merged>.reviews.jsonl`` as reviews of the merged run (the same cases, the same reviewers)
and printed; they change neither the merged record nor its gate. A shard's reviews file that
cannot be read refuses the merge.

Exit status: 0 merged (gate passed, or no gate and every case passed), 1 merged but the gate
failed (or, with no gate, a case failed or the run was cut short), 2 refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Iterable

from pytest_groundeval.reporting.gate import parse_threshold, run_gate
from pytest_groundeval.model import Completeness, GitInfo, Review, RunRecord, ShardRecord
from pytest_groundeval.store.files import Journal, StoreError, read, write
from pytest_groundeval.store.record import build_record, new_run_id, summarize, user_subset
from pytest_groundeval.store.reviews import ReviewError, append, describe, read_reviews, reviews_path
from pytest_groundeval.pytest.shard import selection_digest, shard_of
from pytest_groundeval.run.usage import add_unfinished, budget_record, total_usage

# options that may differ between the shards of one run: they say how a shard ran, not what
VOLATILE_OPTIONS = frozenset({"shard", "concurrency", "numprocesses", "resumed_from", "rescored_from"})
VOLATILE_SELECTION = frozenset({"numprocesses"})
USAGE_COUNTS = frozenset({"input_tokens", "output_tokens", "cost_usd", "cases_priced", "cases_unpriced",
                          "cases_unreported", "unfinished"})


class MergeError(Exception):
    """The shards cannot be merged into one run's record (the message names the files)."""


# ---------------------------------------------------------------- reading
def read_shard(path: Path, *, trust_stored: bool = False) -> RunRecord:
    """A shard's record (``store.read``), its cases re-derived from their answers and data
    (``store/verify.py``: an edited shard is refused); a MergeError otherwise."""
    from pytest_groundeval.store.verify import to_stderr, verified

    try:
        record = read(path)
    except StoreError as e:
        raise MergeError(f"{e}; re-run that shard") from None
    if not isinstance(record, Journal) and record.completeness.shard is not None:
        try:
            record = verified(record, str(path), trust_stored=trust_stored, warn=to_stderr)
        except StoreError as e:  # disagreeing cases (verify.Untrusted), unreadable thresholds
            raise MergeError(str(e)) from None
    if isinstance(record, Journal):
        raise MergeError(f"{path}: a journal, not a run record: that shard did not write its record "
                         "(killed, or its record could not be written); --resume it with the same "
                         "--groundeval-shard to get one")
    if record.completeness.shard is None:
        raise MergeError(f"{path}: not a shard record (its run had no --groundeval-shard K/N): nothing to merge")
    return record


def _shard(record: RunRecord) -> ShardRecord:
    assert record.completeness.shard is not None  # read_shard checked it
    return record.completeness.shard


# ---------------------------------------------------------------- checks
def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _differ(what: str, values: dict[str, Any]) -> str | None:
    """A problem line when the shards' values of ``what`` are not all equal."""
    if len({_show(v) for v in values.values()}) <= 1:
        return None
    return f"the shards differ in {what}: " + "; ".join(f"{p}: {_show(v)}" for p, v in values.items())


def _differing_keys(what: str, dicts: dict[str, dict[str, Any]], skip: Iterable[str]) -> list[str]:
    skip = set(skip)
    keys = sorted({k for d in dicts.values() for k in d} - skip)
    found = [_differ(f"{what} {k}", {p: d.get(k) for p, d in dicts.items()}) for k in keys]
    return [f for f in found if f]


def _price_table(record: RunRecord) -> dict[str, Any]:
    """The record's price table (its usage without the counts)."""
    return record.usage.model_dump(exclude=set(USAGE_COUNTS))


def _options(record: RunRecord) -> dict[str, Any]:
    return record.options.model_dump(mode="json")


def _check_one_run(shards: dict[str, RunRecord], override_thresholds: bool) -> list[str]:
    """Everything that must be equal for the shards to be one run's."""
    answered = {p: r for p, r in shards.items() if r.cases}  # an empty shard names the agent it was asked for
    problems = [
        _differ("the agent and model asked for (requested)", {p: r.requested for p, r in shards.items()}),
        _differ("the agent that answered", {p: r.agent for p, r in answered.items()}),
        _differ("the model that answered", {p: r.model for p, r in answered.items()}),
        _differ("commit (git_sha)", {p: r.git_sha for p, r in shards.items() if r.git_sha}),
        _differ("package versions", {p: r.versions for p, r in shards.items()}),
        _differ("price table", {p: _price_table(r) for p, r in shards.items()}),
        _differ("shard count N", {p: _shard(r).count for p, r in shards.items()}),
        _differ("case set (the selection's size and digest of its case ids)",
                {p: [_shard(r).selection_size, _shard(r).selection_sha256] for p, r in shards.items()}),
        _differ("eval items deselected by -k / -m / --lf", {p: _user_deselected(r) for p, r in shards.items()
                                                            if r.completeness.selected is not None}),
    ]
    skip = VOLATILE_OPTIONS | ({"thresholds"} if override_thresholds else set())
    problems += _differing_keys("option", {p: _options(r) for p, r in shards.items()}, skip)
    problems += _differing_keys("selection", {p: r.completeness.selection for p, r in shards.items()},
                                VOLATILE_SELECTION)
    return [p for p in problems if p]


def _user_deselected(record: RunRecord) -> int:
    """Eval items the user's selection left out (not the other shards' cases)."""
    comp = record.completeness
    return comp.deselected - (_shard(record).selection_size - (comp.selected or 0))


def _check_shard_set(shards: dict[str, RunRecord]) -> tuple[int, list[str]]:
    """The shard count and the problems with the set of shards given (twice, missing)."""
    first = _shard(next(iter(shards.values())))
    count, size = first.count, first.selection_size
    by_index: dict[int, list[str]] = {}
    for p, r in shards.items():
        by_index.setdefault(_shard(r).index, []).append(p)
    problems = [f"shard {k}/{count} is given twice: {', '.join(ps)}" for k, ps in sorted(by_index.items())
                if len(ps) > 1]
    missing = [k for k in range(1, count + 1) if k not in by_index]
    selected = [r.completeness.selected for r in shards.values()]
    counted = None if None in selected else sum(selected)  # type: ignore[arg-type]
    if missing and not problems and counted != size:
        held = f"hold {counted} of the {size} selected cases" if counted is not None else "do not say how many they hold"
        problems.append(f"shard(s) {', '.join(f'{k}/{count}' for k in missing)} missing: no record given, and the "
                        f"given shards ({', '.join(shards)}) {held}")
    elif not problems and counted is not None and counted != size:
        problems.append(f"the shards' selected cases add up to {counted}, not to the {size} their selection holds ("
                        + "; ".join(f"{p}: {r.completeness.selected}" for p, r in shards.items()) + ")")
    return count, problems


def _check_cases(shards: dict[str, RunRecord], count: int) -> list[str]:
    """Each case in its own shard's record, and in one record only."""
    problems: list[str] = []
    seen: dict[tuple, tuple[str, str | None]] = {}
    for p, r in shards.items():
        index = _shard(r).index
        for c in r.cases:
            key = c.result_key  # --repeat: each repeat once
            if key in seen:
                other, hash_ = seen[key]
                content = ("with different content hashes: not the same case set"
                           if hash_ != c.content_hash else "the shards overlap")
                again = f" (repeat {c.repeat})" if c.repeat is not None else ""
                problems.append(f"case {c.task}:{c.case_id}{again} is in {other} and in {p} ({content})")
                continue
            seen[key] = (p, c.content_hash)
            belongs = shard_of(c.task, c.case_id, count)
            if belongs != index:
                problems.append(f"{p} (shard {index}/{count}) holds case {c.task}:{c.case_id}, which belongs to shard "
                                f"{belongs}/{count}: not a record of this split")
    return problems


def _refuse(problems: list[str]) -> None:
    if problems:
        raise MergeError("cannot merge these shards into one run's record:\n  " + "\n  ".join(problems))


# ---------------------------------------------------------------- merging
def _tasks(held: dict[str, list[str]], options: dict[str, Any]) -> dict[str, Any]:
    """The task objects that sum the cases up, as the shards' runs built them (``held``: each
    task, and the shards holding its cases)."""
    from pytest_groundeval.store.verify import tasks_of

    tasks, missing = tasks_of(held, options)
    for name, why in missing.items():
        raise MergeError(f"{why}: task of the shards {', '.join(held[name])}; merge where the shards ran")
    return tasks


def merge(paths: list[Path], thresholds: list[str] | None = None, *, trust_stored: bool = False) -> tuple[
        RunRecord, dict[str, Any]]:
    """The merged record, built once, and the task objects that summed it up. ``thresholds``
    (``TASK.METRIC=VALUE``) replace the shards' own as the merged run's gate."""
    record, tasks, _ = merge_with_reviews(paths, thresholds, trust_stored=trust_stored)
    return record, tasks


def merge_with_reviews(paths: list[Path], thresholds: list[str] | None = None, *, trust_stored: bool = False) -> tuple[
        RunRecord, dict[str, Any], list[Review]]:
    """:func:`merge`, and the human reviews beside the shards (``groundeval review``, every line,
    in shard order) as reviews of the merged run: the cases are the same, the reviews stay theirs.
    A reviews file that cannot be read refuses the merge (naming it)."""
    shards: dict[str, RunRecord] = {}
    reviews: list[Review] = []
    for path in paths:
        key = str(path)
        if key in shards:
            raise MergeError(f"{path} is given twice")
        shards[key] = read_shard(path, trust_stored=trust_stored)
        try:
            found = read_reviews(path, shards[key])
        except ReviewError as e:
            raise MergeError(str(e)) from None
        reviews += found.lines
    # in stages: a shard set is only worth checking once the shards are one run's, and so on
    _refuse(_check_one_run(shards, override_thresholds=thresholds is not None))
    count, set_problems = _check_shard_set(shards)
    _refuse(set_problems)
    _refuse(_check_cases(shards, count))

    ordered = sorted(shards.items(), key=lambda item: _shard(item[1]).index)
    first = ordered[0][1]
    first_options = _options(first)
    cases = sorted((c for _, r in ordered for c in r.cases), key=lambda c: (c.task, c.case_id, c.repeat or 0))
    cut = [(p, r) for p, r in ordered if r.completeness.cut_short]
    spec = _shard(first)
    if not cut and selection_digest((c.task, c.case_id) for c in cases) != spec.selection_sha256:
        _refuse([f"their cases ({', '.join(p for p, _ in ordered)}) are not the selection they were split from "
                 f"({len(cases)} cases; the selection holds {spec.selection_size})"])

    held: dict[str, list[str]] = {}
    for p, r in ordered:
        for task in sorted({c.task for c in r.cases}):
            held.setdefault(task, []).append(p)
    tasks = _tasks(held, first_options)
    from pytest_groundeval.tasks import registry

    texts = thresholds if thresholds is not None else first_options.get("thresholds", [])
    try:
        parsed = [parse_threshold(t, registry()) for t in texts]
    except ValueError as e:
        where = "--threshold" if thresholds is not None else f"the shards' recorded thresholds ({', '.join(shards)})"
        raise MergeError(f"{where}: {e}") from None
    if thresholds is None:  # the shards' own: those from the project's ini apply only where their task ran
        ini = _ini_thresholds(r for _, r in ordered)
        parsed = [dataclasses.replace(t, origin="ini") if f"{t.label}={t.value}" in ini else t for t in parsed]

    selected = [r.completeness.selected for _, r in ordered]
    known = [r for _, r in ordered if r.completeness.selected is not None]
    deselected = _user_deselected(known[0]) if known else first.completeness.deselected
    selection = first.completeness.selection
    completeness = Completeness(
        selected=None if None in selected else sum(selected), deselected=deselected,  # type: ignore[arg-type]
        recorded=len(cases), subset=user_subset(selection, deselected), selection=selection, cut_short=bool(cut),
        reason="; ".join(f"shard {_shard(r).index}/{count} ({p}): {r.completeness.reason}" for p, r in cut) or None,
        shard=None)
    summary = summarize(tasks, cases)
    gate = run_gate(parsed, summary, completeness)
    # executions after a case's first (a plugin re-ran it, reruns.py): kept, and their usage counted
    reruns = [c for _, r in ordered for c in r.reruns or []]
    usage = total_usage(cases + reruns).model_copy(update=_price_table(first))  # the shards' (all equal)
    for shard in shards.values():  # what a resumed shard's killed session had paid for unfinished cases
        usage = add_unfinished(usage, shard.usage.unfinished)
    budgets = [r.budget.max_cost_usd for _, r in ordered if r.budget is not None]
    budget = budget_record(sum(budgets) if budgets else None, cases, usage)  # --max-cost is per shard
    answered = next((r for _, r in ordered if r.cases), first)
    options = {**first_options, "shard": None, "resumed_from": None, "rescored_from": None,
               "concurrency": max(_options(r).get("concurrency") or 1 for _, r in ordered),
               "thresholds": [f"{t.label}={t.value}" for t in parsed],
               "merged_from": [r.run_id for _, r in ordered]}
    record = build_record(
        run_id=new_run_id(), started_at=min(r.started_at for _, r in ordered), agent=answered.agent,
        model=answered.model, requested=first.requested, options=options, cases=cases, summary=summary,
        completeness=completeness, usage=usage, budget=budget, gate=gate, rootdir=Path.cwd(), reruns=reruns,
        finished_at=max(r.finished_at for _, r in ordered),
        provenance=(next((r.git_sha for _, r in ordered if r.git_sha), None), first.versions),
        git=merged_git([r for _, r in ordered]))
    return record, tasks, [r.model_copy(update={"run_id": record.run_id}) for r in reviews]


def merged_git(shards: Iterable[RunRecord]) -> GitInfo | None:
    """The merged run's ``git`` block: the shards' commit (merge refuses shards of different
    commits), the first branch a shard names, and dirty when any shard's tree was (None when
    no shard knew); None when no shard had one (records from before the block)."""
    blocks = [r.git for r in shards if r.git is not None]
    if not blocks:
        return None
    dirty = [b.dirty for b in blocks if b.dirty is not None]
    return GitInfo(commit=next((b.commit for b in blocks if b.commit), None),
                   branch=next((b.branch for b in blocks if b.branch), None),
                   dirty=any(dirty) if dirty else None)


def _ini_thresholds(shards: Iterable[RunRecord]) -> set[str]:
    """The recorded thresholds that came from the project's ini (``TASK.METRIC=VALUE``), as far
    as it matters: only those are ever left unapplied (their task had no case in that shard),
    and one whose task ran in no shard is unapplied in every shard that recorded it."""
    found: set[str] = set()
    for r in shards:
        if r.gate is None:  # thresholds, yet no gate: not one of them applied
            found.update(_options(r).get("thresholds", []))
            continue
        found.update(f"{t.metric}={t.threshold}" for t in r.gate.thresholds if t.applied is False)
    return found


def exit_status(record: RunRecord) -> int:
    """As pytest's for the unsharded run: with a gate, the gate decides; else any failure."""
    if record.gate is not None:
        return 0 if record.gate.passed else 1
    failing = record.completeness.cut_short or any(c.outcome in ("failed", "error") for c in record.cases)
    return 1 if failing else 0


# ---------------------------------------------------------------- the subcommand
def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "merge", help="merge the records of a sharded run (--groundeval-shard K/N) into one run record",
        description="Merge the N records of a run split with --groundeval-shard K/N into the record the "
        "unsharded run writes: the cases, and their summary and gate computed again. Refuses shards of "
        "different agents, models, options or case sets, a shard given twice and a missing shard. "
        "Exit status: 0 merged and the gate passed (or no gate and no case failed), 1 the gate failed "
        "(or a case failed, or a shard was cut short), 2 refused.")
    p.add_argument("shards", nargs="+", type=Path, metavar="SHARD", help="the shard records (runs/*.json)")
    p.add_argument("-o", "--output", required=True, type=Path, metavar="RUN.json", help="where to write the record")
    p.add_argument("--threshold", dest="thresholds", action="append", default=None, metavar="TASK.METRIC=VALUE",
                   help="the merged run's gate, repeatable (in place of the thresholds the shards recorded)")
    from pytest_groundeval.store.verify import TRUST_HELP

    p.add_argument("--trust-stored", action="store_true", help=TRUST_HELP)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        record, tasks, reviews = merge_with_reviews(args.shards, args.thresholds, trust_stored=args.trust_stored)
    except MergeError as e:
        print(f"groundeval merge: {e}", file=sys.stderr)
        return 2
    try:
        write(record, args.output)
        if reviews:  # beside the merged record, in place of any reviews of an earlier record at that path
            append(args.output, reviews, replace=True)
    except OSError as e:
        print(f"groundeval merge: could not write {args.output}: {e.strerror or e}", file=sys.stderr)
        return 2
    from pytest_groundeval.reporting.terminal import terminal_lines

    for line in terminal_lines(record):
        print(line)
    if reviews:  # beside the scorer's verdicts above, which the reviews do not change (nor the gate)
        print(f"human reviews: {len(reviews)}, carried to {reviews_path(args.output)} (scorer's verdict -> reviewer's; "
              "the scores and the gate above are the scorer's)")
        for r in reviews:
            print(f"  {describe(r)}")
    if record.completeness.cut_short:
        print(f"groundeval merge: the run was cut short: {record.completeness.reason}", file=sys.stderr)
    from pytest_groundeval.reporting.terminal import plural

    print(f"merged {plural(len(args.shards), 'shard record')}, {plural(len(record.cases), 'case')}: {args.output}")
    return exit_status(record)
