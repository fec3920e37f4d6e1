"""Nothing read back is trusted: every stored case re-derived from its raw output and its data.

A record, a shard or a journal is a file anyone (an agent, a hand, a bad merge) can edit. So
``groundeval merge``, ``report`` and ``compare`` and ``pytest --resume`` never take a stored
outcome, metric, summary or gate as read: :func:`rederive` scores each stored case again the way
``--rescore`` does (``runner.reuse``: the stored answer and FHIR activity parsed and scored against
the truth read from the case's data, no agent call) and the summary and gate are then computed
from those results. A judged item's stored judge calls are replayed (the calls are the judges'
raw answers, as ``raw_output`` is the agent's); its majority and the judge score are computed
again (:class:`ReplayJury`).

A stored case that disagrees with what it re-derives to (its outcome, predicted answer, ground
truth or score) is named with the first field that differs; such a run is refused
(:class:`Untrusted`) unless the user passes ``--trust-stored``, which keeps the stored cases and
says so. A case that cannot be re-derived (its data is not found,
or the data changed since the run: another content hash) is also named; it cannot be vouched for,
so it is refused the same way. A case of a task that is not installed here (a record of another
team's task, compared by the kinds its record declares) cannot be scored here at all: it is used
as stored, and the command says so.

The cases are found by the task settings the record names (``options[<task>]``, absolute
paths); where that folder is not here (a record from another machine), the task's packaged
cases are tried: a case is used only when its content hash is the stored one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from pytest_groundeval.model import CaseRef, CaseResult, JudgedItem, JuryRecord, source_ref
from pytest_groundeval.store.files import StoreError, read

#: the parts of a case that decide what it counts for
COMPARED = ("outcome", "ground_truth", "predicted", "score")
MAX_SHOWN = 10


class Untrusted(StoreError):
    """Stored results that disagree with what they re-derive to, or cannot be re-derived."""


@dataclass
class Rederived:
    """The re-derived cases (in the stored order), and what could not be vouched for."""

    cases: list[CaseResult]
    disagree: list[str] = field(default_factory=list)  # "<task>:<case>: <field> stored X, re-derived Y"
    unverifiable: list[str] = field(default_factory=list)  # "<task>:<case>: why"
    tasks: dict[str, Any] = field(default_factory=dict)
    not_installed: dict[str, int] = field(default_factory=dict)  # task -> its cases, used as stored

    @property
    def trusted(self) -> bool:
        return not self.disagree and not self.unverifiable

    def problems(self, where: str) -> str:
        lines = [f"{where}: {len(self.disagree)} stored case(s) disagree with their re-derived result"
                 if self.disagree else None,
                 *[f"  {d}" for d in self.disagree[:MAX_SHOWN]],
                 f"  (+{len(self.disagree) - MAX_SHOWN} more)" if len(self.disagree) > MAX_SHOWN else None,
                 f"{where}: {len(self.unverifiable)} stored case(s) cannot be re-derived here"
                 if self.unverifiable else None,
                 *[f"  {u}" for u in self.unverifiable[:MAX_SHOWN]],
                 f"  (+{len(self.unverifiable) - MAX_SHOWN} more)" if len(self.unverifiable) > MAX_SHOWN else None]
        return "\n".join(line for line in lines if line)


class ReplayJury:
    """A jury that calls no judge: the stored calls of one case, their majority and score
    computed again (``judges.jury.majority`` / ``jury_score``). An item the stored case has no
    calls for is unscored, saying so."""

    def __init__(self, stored: JuryRecord | None) -> None:
        self.stored = stored

    def judge(self, text: str, items: Iterable[Any], context: str) -> JuryRecord:
        from pytest_groundeval.judges.jury import jury_score, majority

        kept = {i.id: i for i in (self.stored.items if self.stored is not None else [])}
        out = []
        for item in items:
            old = kept.get(item.id)
            if old is None or not old.calls:
                why = old.unscored if old is not None and old.unscored else "no stored judge call to replay"
                out.append(JudgedItem(id=item.id, question=item.question, points=item.points, unscored=why))
                continue
            verdict, why = majority(c.verdict for c in old.calls)
            out.append(JudgedItem(id=item.id, question=item.question, points=item.points, verdict=verdict,
                                  unscored=why, calls=old.calls))
        base = self.stored or JuryRecord()
        return base.model_copy(update={"items": out, "score": jury_score(out)})


def tasks_of(names: Iterable[str], options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The installed task objects for ``names``, on the data the record's ``options`` name;
    and, for each task that cannot be built, why."""
    from pytest_groundeval.tasks import registry

    classes = registry()
    tasks: dict[str, Any] = {}
    missing: dict[str, str] = {}
    for name in sorted(set(names)):
        cls = classes.get(name)
        if cls is None:
            missing[name] = f"task {name!r} is not installed here ({', '.join(sorted(classes))} are)"
            continue
        where = (options.get(name) or {}).get(cls.source.key)
        tasks[name] = cls(Path(where) if where else Path("."))
    return tasks, missing


def _refs(task: Any) -> dict[str, CaseRef]:
    try:
        return {r.case_id: r for r in task.discover()}
    except (OSError, ValueError):
        return {}


def _packaged(task: Any) -> Any | None:
    """The task on its packaged cases (a record made where the data lay elsewhere)."""
    source = type(task).source
    if not getattr(source, "packaged", False):
        return None
    from pytest_groundeval.tasks.resources import data_path

    try:
        path = Path(data_path(source.default))
    except (OSError, ValueError, LookupError):
        return None
    return type(task)(path) if path != task.path else None


def _show(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def differs(stored: CaseResult, derived: CaseResult) -> str | None:
    """The first of :data:`COMPARED` in which the two disagree, shown (None: they agree)."""
    for name in COMPARED:
        a, b = getattr(stored, name), getattr(derived, name)
        da = a.model_dump(mode="json") if hasattr(a, "model_dump") else a
        db = b.model_dump(mode="json") if hasattr(b, "model_dump") else b
        if json.dumps(da, sort_keys=True, default=str) != json.dumps(db, sort_keys=True, default=str):
            if name == "score" and isinstance(da, dict) and isinstance(db, dict):
                for key in ("passed", "metrics", "dimensions", "reason", "jury", "details"):
                    if json.dumps(da.get(key), sort_keys=True, default=str) != \
                            json.dumps(db.get(key), sort_keys=True, default=str):
                        return f"score.{key} stored {_show(da.get(key))}, re-derived {_show(db.get(key))}"
            return f"{name} stored {_show(da)}, re-derived {_show(db)}"
    return None


def _rederive_one(task: Any, case: Any, old: CaseResult, run_id: str | None, require_grounded: bool) -> CaseResult:
    from pytest_groundeval.run.runner import rescored

    if getattr(task, "judged_items", None):
        task.jury = ReplayJury(old.score.jury if old.score is not None else None)
    return rescored(task, case, old, run_id, require_grounded=require_grounded)


def rederive(cases: list[CaseResult], options: dict[str, Any], run_id: str | None, *,
             tasks: dict[str, Any] | None = None) -> Rederived:
    """Every stored case scored again from its stored answer and its data's truth (module
    docstring). A case that was not answered (an error before the answer, not run, skipped)
    re-derives to itself: there is nothing to score, and its outcome says why. ``tasks``: the
    task objects to use (a session's, for ``--resume``); else those the record's options name."""
    if tasks is None:
        tasks, missing = tasks_of((c.task for c in cases), options)
    else:
        missing = {c.task: f"task {c.task!r} is not in this session" for c in cases if c.task not in tasks}
    out = Rederived(cases=[], tasks=tasks)
    refs: dict[int, dict[str, CaseRef]] = {}
    fallback: dict[str, Any] = {}
    for old in cases:
        label = f"{old.task}:{old.case_id}" + (f"[r{old.repeat}]" if old.repeat is not None else "")
        if old.task in missing:  # nothing here can score it: used as stored, and said so
            out.not_installed[old.task] = out.not_installed.get(old.task, 0) + 1
            out.cases.append(old)
            continue
        if old.outcome in ("skipped",) or (old.outcome == "error" and old.raw_output is None
                                            and old.structured_output is None and old.fhir is None):
            out.cases.append(old)  # nothing was answered: nothing to score
            continue
        task = tasks[old.task]
        case = _load(task, refs, old)
        if case is None:  # not in the named data (or changed there): the packaged cases, same content only
            if old.task not in fallback:
                fallback[old.task] = _packaged(task)
            other = fallback[old.task]
            case = _load(other, refs, old) if other is not None else None
            if case is None:
                out.unverifiable.append(f"{label}: its case is not in {task.path} with the content it was run on "
                                        "(moved, edited or deleted); give the data it ran on")
                out.cases.append(old)
                continue
            task = other
        derived = _rederive_one(task, case, old, run_id, bool(options.get("require_grounded")))
        derived = derived.model_copy(update={"rescored_from": old.rescored_from, "duration_s": old.duration_s})
        why = differs(old, derived)
        if why is not None:
            out.disagree.append(f"{label}: {why}")
        out.cases.append(derived)
    return out


def _load(task: Any, refs: dict[int, dict[str, CaseRef]], old: CaseResult) -> Any:
    """``old``'s case loaded from ``task``'s data (as the repeat it was), when it is there with
    the content it was run on; else None. ``refs``: each task's listed cases, listed once."""
    from dataclasses import replace

    from pytest_groundeval.run.runner import load_case

    if id(task) not in refs:
        refs[id(task)] = _refs(task)
    ref = source_ref(refs[id(task)], old.case_id)  # (a project's own suite's case: <suite>/<id>)
    if ref is None:
        return None
    case, _ = load_case(task, replace(ref, repeat=old.repeat) if old.repeat is not None else ref)
    return case if case is not None and case.content_hash == old.content_hash else None


def checked(cases: list[CaseResult], options: dict[str, Any], run_id: str | None, where: str, *,
            trust_stored: bool, warn: Any = None) -> Rederived:
    """:func:`rederive`, refused (:class:`Untrusted`) when anything disagrees or cannot be
    re-derived, unless ``trust_stored``: then the stored cases are kept, and ``warn`` (a
    callable taking a line) is told so."""
    result = rederive(cases, options, run_id)
    if result.not_installed and warn is not None:
        warn(f"{where}: " + "; ".join(f"{n} {task} case(s) used as stored, unverified: task {task!r} is not "
                                      "installed here, so nothing here can re-score them"
                                      for task, n in sorted(result.not_installed.items())))
    if result.trusted:
        return result
    text = result.problems(where)
    if not trust_stored:
        raise Untrusted(f"{text}\nrefused: a stored result is used only when it re-derives from its answer and "
                        "data (pass --trust-stored to use the stored results as they are, unverified)")
    if warn is not None:
        warn(f"{text}\n--trust-stored: the stored results are used as they are, unverified")
    result.cases = list(cases)
    return result


def _gate(record: Any, summary: dict[str, Any], where: str) -> Any:
    """The record's gate computed again from its thresholds and the re-derived summary. A
    threshold the stored gate shows as not applied keeps that only where the record holds no
    case of its task (an ini threshold of a task the run did not select): nothing is hidden by it."""
    from pytest_groundeval.reporting.gate import parse_threshold, run_gate
    from pytest_groundeval.tasks import registry

    idle = {c.metric for c in (record.gate.thresholds if record.gate is not None else []) if not c.applied}
    classes = {**registry(), **summary}
    parsed = []
    for text in record.options.thresholds:
        try:
            t = parse_threshold(text, classes)
        except ValueError as e:
            raise StoreError(f"{where}: its recorded thresholds: {e}") from None
        if t.label in idle and t.task not in summary:
            from dataclasses import replace

            t = replace(t, origin="ini")
        parsed.append(t)
    return run_gate(parsed, summary, record.completeness)


def verified(stored: Any, where: str, *, trust_stored: bool = False, warn: Any = None) -> Any:
    """A record or journal as ``store.read`` gave it, its cases re-derived (:func:`checked`) and,
    for a record, its summary and gate computed again from them: nothing of it is taken as
    read. Refused (:class:`Untrusted`) as :func:`checked` says."""
    from pytest_groundeval.model import RunRecord
    from pytest_groundeval.store.record import summarize

    options = stored.options.model_dump() if hasattr(stored.options, "model_dump") else dict(stored.options)
    result = checked(list(stored.cases), options, stored.run_id, where, trust_stored=trust_stored, warn=warn)
    if not isinstance(stored, RunRecord):
        return stored.model_copy(update={"cases": result.cases})
    missing = sorted({c.task for c in result.cases} - set(result.tasks))
    if missing:  # a task not installed here keeps its stored summary (warned: checked())
        summary = {**{k: v for k, v in stored.summary.items() if k in missing},
                   **summarize(result.tasks, [c for c in result.cases if c.task not in missing])}
    else:
        summary = summarize(result.tasks, result.cases)
    from pytest_groundeval.run.repeats import repeat_records

    return stored.model_copy(update={"cases": result.cases, "summary": summary, "gate": _gate(stored, summary, where),
                                     "repeats": repeat_records(result.cases)})


def read_verified(path: Path | str, *, trust_stored: bool = False, warn: Any = None) -> Any:
    """``store.read`` and then :func:`verified`: what merge, report and compare read a stored run with."""
    return verified(read(path), str(path), trust_stored=trust_stored, warn=warn)


def to_stderr(line: str) -> None:
    import sys

    print(line, file=sys.stderr)


TRUST_HELP = ("use the stored cases, summary and gate as they are, unverified (by default each stored case is "
              "re-scored from its stored answer and its data, and a run whose stored results disagree is refused)")


def check_resumable(stored: Any, tasks: dict[str, Any], *, require_grounded: bool, trust_stored: bool,
                    warn: Any = None) -> None:
    """``--resume``: the stored results that would stand (no call) must re-derive to what the
    journal or record says (an edited line is refused, naming its case; ``--trust-stored`` uses
    it as stored, saying so). A case whose data changed or is gone is simply run again."""
    cases = [c for c in stored.cases.values() if c.finished]
    result = rederive(cases, {"require_grounded": require_grounded}, stored.run_id, tasks=tasks)
    if not result.disagree:
        return
    text = Rederived(cases=[], disagree=result.disagree).problems(str(stored.path))
    if not trust_stored:
        raise Untrusted(f"{text}\nrefused: a stored result is resumed only when it re-derives from its answer and "
                        "data (re-run those cases without --resume, or pass --trust-stored to keep them as stored)")
    if warn is not None:
        warn(f"{text}\n--trust-stored: the stored results are kept as they are, unverified")
