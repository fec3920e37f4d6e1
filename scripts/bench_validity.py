"""How gameable are the scorers? Mutants killed and natural variants passed, per task.

For every task (extraction, reconciliation, labs, orders, write, letter) the script takes a
RIGHT answer on each committed case (the truth rendered as an answer: extraction's and
reconciliation's truth lists, labs' offline baseline, the write tool's build of the expected
MedicationStatement, the order / reading / stopped request the orders truth requires, the
letter template), checks that it passes, and then:

* applies the *mutation operators* (``_validity_ops.py``, ``_validity_fhir.py``,
  ``_validity_letter.py``: each a small named function whose docstring says why its output is
  clinically WRONG): a mutant is *killed* when the task's real parse + scorer fails it;
* applies the *natural-variant generators* (answers a model writes that are still RIGHT:
  markdown letters, prose around JSON, fences, harmless FHIR elements, translations): a
  variant *passes* when the real parse + scorer passes it.

Everything is offline: no agent, no model, no FHIR server (orders: the scorer takes the
server's observed activity, built here as the server would record the write). Goals: at least
99 % of mutants killed and 99 % of variants passed, per task; the exit status is 1 when a task
misses either goal. ``--show`` lists the surviving mutants and the failing variants, by
operator, with the scorer's reason, so a developer can act on them.

Usage: uv run python scripts/bench_validity.py [--limit N] [--seed S] [--task NAME ...] [--show]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import random
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.append(str(ROOT / "tests"))  # write_args.py: the expected MedicationStatement's build arguments

from _validity_fhir import FHIR_MUTANTS, FHIR_VARIANTS  # noqa: E402
from _validity_letter import LETTER_MUTANTS, LETTER_VARIANTS  # noqa: E402
from _validity_ops import (JSON_MUTANTS, JSON_VARIANTS, LABS_MUTANTS, LABS_VARIANTS, Ctx, Op,  # noqa: E402
                           evasive, words_of)

GOAL = 0.99
TASKS = ("extraction", "reconciliation", "labs", "orders", "write", "letter")


@dataclass
class Sample:
    """One case with its right answer (task-native: a JSON object, a resource, a letter)."""

    case_id: str
    case: Any
    answer: Any
    facts: dict[str, Any]


@dataclass
class Bench:
    """A task as the bench sees it: its samples, how an answer is scored, its operators."""

    name: str
    task: Any  # the real task (pytest_groundeval.tasks)
    samples: Callable[[random.Random | None], Iterator[Sample]]  # lazily; shuffled by the rng when given
    verdict: Callable[[Sample, Any], tuple[bool, str]]  # (passed, the scorer's reason)
    mutants: tuple[Op, ...]
    variants: tuple[Op, ...]
    to_original: Callable[[Any], Any] = lambda a: a  # the right answer as the scorer takes it


# ---------------------------------------------------------------- scoring through the real task
def _task(name: str) -> Any:
    from pytest_groundeval.tasks import registry
    from pytest_groundeval.tasks.resources import data_path

    cls = registry()[name]
    return cls(data_path(cls.source.default))


def _text_verdict(task: Any) -> Callable[[Sample, Any], tuple[bool, str]]:
    """An answer text through ``task.parse`` and ``task.score`` (a parse error: failed)."""
    from pytest_groundeval.model import AgentOutput, ParseError

    def verdict(sample: Sample, text: Any) -> tuple[bool, str]:
        try:
            prediction = task.parse(AgentOutput(text=text))
        except ParseError as e:
            return False, f"parse error: {e}"
        score = task.score(prediction, sample.case)
        return bool(score.passed), score.reason or ""
    return verdict


def _loaded(task: Any, order: random.Random | None) -> Iterable[tuple[str, Any]]:
    """The task's cases, loaded one by one (in a seeded random order when ``order`` is given)."""
    from pytest_groundeval.model import CaseError

    refs = list(task.discover())
    if order is not None:
        order.shuffle(refs)
    for ref in refs:
        try:
            yield ref.case_id, task.load(ref)
        except CaseError:
            continue  # a case the task refuses is no case for anyone


# ---------------------------------------------------------------- extraction, reconciliation
def _catalog() -> dict[str, str]:
    from pytest_groundeval.tasks.reconciliation import site_catalog

    return site_catalog()


def _other_drug(taken: set[str], words: set[str], rng: random.Random) -> tuple[str, str]:
    """A catalog product the case has nothing of (code and no display word in it)."""
    free = [(c, d) for c, d in sorted(_catalog().items())
            if c not in taken and not (words_of(d) - {"mg", "oral", "tablet", "ml", "capsule"}) & words]
    return rng.choice(free)


def code_list_bench(name: str, rng: random.Random) -> Bench:
    task = _task(name)
    key = "active_medications" if name == "extraction" else "medications"

    def samples(order: random.Random | None) -> Iterator[Sample]:
        for cid, case in _loaded(task, order):
            words = words_of(case.inputs["bundle_json"] + " " + case.inputs.get("patient_report", ""))
            facts = {"words": words, "other_drug": _other_drug({t["code"] for t in case.truth}, words, rng)}
            yield Sample(cid, case, {key: [dict(t) for t in case.truth]}, facts)
    return Bench(name, task, samples, _text_verdict(task), JSON_MUTANTS, JSON_VARIANTS, json.dumps)


# ---------------------------------------------------------------- labs
def labs_bench(rng: random.Random) -> Bench:
    task = _task("labs")

    def samples(order: random.Random | None) -> Iterator[Sample]:
        for cid, case in _loaded(task, order):
            yield Sample(cid, case, json.loads(task.baseline(case.inputs).text), {})
    return Bench("labs", task, samples, _text_verdict(task), LABS_MUTANTS, LABS_VARIANTS, json.dumps)


# ---------------------------------------------------------------- write
def write_bench(rng: random.Random) -> Bench:
    from write_args import build_args

    from pytest_groundeval.fhir import hc_tools
    from pytest_groundeval.scorers import drugtext

    task = _task("write")

    def samples(order: random.Random | None) -> Iterator[Sample]:
        for cid, case in _loaded(task, order):
            built = hc_tools.build_medication_statement(**build_args(case.truth))
            if "resource" not in built:
                continue
            exp = case.truth["expected"]
            dose = (exp["dosage"] or {}).get("dose")
            display = exp["display"]
            facts = {"kind": "write", "note": case.truth["note"], "status": exp["status"], "display": display,
                     "words": words_of(case.truth["note"] + " " + display), "today": "2026-01-01",
                     "dose": (dose["value"], dose["unit"]) if dose and (exp["dosage"] or {}).get("dose_max") is None
                     else None,
                     "ingredients": sorted(drugtext.product(display).ingredients),
                     "oral": any(w in display.casefold() for w in ("oral", "tablet", "capsule"))}
            yield Sample(cid, case, built["resource"], facts)
    return Bench("write", task, samples, _text_verdict(task), (evasive,) + FHIR_MUTANTS, FHIR_VARIANTS, json.dumps)


# ---------------------------------------------------------------- orders
BASE_URL = "http://127.0.0.1:8103/fhir/R4"  # the case's server as it would be named (no server is started)


def _orders_resource(case: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The resource the truth requires, and (stop) the record's resource it updates."""
    from pytest_groundeval.tasks.orders import resources

    t, exp = case.truth, case.truth["expected"]
    from pytest_groundeval.fhir.codes import LOINC as loinc, UCUM as ucum
    if t["kind"] == "hba1c":
        return ({"resourceType": "ServiceRequest", "status": "active", "intent": "order",
                 "code": {"coding": [{"system": loinc, "code": "4548-4"}]}, "subject": {"reference": t["patient"]},
                 "authoredOn": t["today"]}, None)
    if t["kind"] == "bp":
        def comp(code: str, value: int) -> dict[str, Any]:
            return {"code": {"coding": [{"system": loinc, "code": code}]},
                    "valueQuantity": {"value": value, "unit": "mmHg", "system": ucum, "code": "mm[Hg]"}}
        return ({"resourceType": "Observation", "status": "final",
                 "category": [{"coding": [{"system": "http://terminology.hl7.org/CodeSystem/observation-category",
                                           "code": "vital-signs"}]}],
                 "code": {"coding": [{"system": loinc, "code": "85354-9"}]}, "subject": {"reference": t["patient"]},
                 "effectiveDateTime": exp["effective"],
                 "component": [comp("8480-6", exp["systolic"]), comp("8462-4", exp["diastolic"])]}, None)
    rtype, rid = exp["id"].split("/")
    before = next(r for r in resources(case.inputs["bundle"]) if r["resourceType"] == rtype and r.get("id") == rid)
    return {**json.loads(json.dumps(before)), "status": "stopped"}, before


def orders_activity(resource: dict[str, Any] | str, before: dict[str, Any] | None) -> Any:
    """What the case's FHIR server would record for this one write: its request log (a search,
    then the create or the update) and the state diff (server bookkeeping left out, as
    ``fhir/state.py`` leaves it out). A text instead of a resource: an agent that only said
    something (a search, no write)."""
    from pytest_groundeval.fhir.state import content
    from pytest_groundeval.model import FhirActivity, FhirChange, FhirExchange

    if isinstance(resource, str):
        return FhirActivity(base_url=BASE_URL, requests=[FhirExchange(seq=1, method="GET", path="Patient", status=200)])
    rtype = resource["resourceType"]
    search = FhirExchange(seq=1, method="GET", path=f"{rtype}?subject={resource.get('subject', {}).get('reference')}",
                          status=200, response={"resourceType": "Bundle", "type": "searchset", "total": 0})
    if before is None:
        stored = {**resource, "id": "bench-1"}
        write = FhirExchange(seq=2, method="POST", path=rtype, status=201, request=resource, response=stored)
        change = FhirChange(kind="created", resource_type=rtype, id="bench-1", after=content(stored))
    else:
        stored = {**resource, "id": before["id"]}
        write = FhirExchange(seq=2, method="PUT", path=f"{rtype}/{before['id']}", status=200, request=stored,
                             response=stored)
        change = FhirChange(kind="updated", resource_type=rtype, id=before["id"], before=content(before),
                            after=content(stored))
    return FhirActivity(base_url=BASE_URL, requests=[search, write], changes=[change])


def orders_bench(rng: random.Random) -> Bench:
    """Cases with something due (a case with nothing due has no resource to mutate: its right
    answer is to write nothing)."""
    task = _task("orders")

    def samples(order: random.Random | None) -> Iterator[Sample]:
        for cid, case in _loaded(task, order):
            if not case.truth["due"]:
                continue
            resource, before = _orders_resource(case)
            exp = case.truth["expected"]
            facts = {"kind": case.truth["kind"], "note": case.inputs.get("note") or "", "today": case.truth["today"],
                     "before": before, "systolic": exp.get("systolic"), "diastolic": exp.get("diastolic"),
                     "words": words_of(case.inputs.get("note") or "")}
            yield Sample(cid, case, resource, facts)

    def verdict(sample: Sample, resource: Any) -> tuple[bool, str]:
        activity = orders_activity(resource, sample.facts["before"])
        case = dataclasses.replace(sample.case, inputs={**sample.case.inputs, "fhir_activity": activity})
        score = task.score(task.parse(_output("")), case)  # the orders task scores the server's state
        return bool(score.passed), score.reason or ""
    return Bench("orders", task, samples, verdict, (evasive,) + FHIR_MUTANTS, FHIR_VARIANTS)


def _output(text: str) -> Any:
    from pytest_groundeval.model import AgentOutput

    return AgentOutput(text=text)


# ---------------------------------------------------------------- letter
def letter_bench(rng: random.Random) -> Bench:
    from pytest_groundeval.scorers import drugtext
    from pytest_groundeval.tasks.letter import plain_name, template_letter

    task = _task("letter")

    def samples(order: random.Random | None) -> Iterator[Sample]:
        for cid, case in _loaded(task, order):
            items = []
            for t in case.truth["items"]:
                name = plain_name(t["display"])
                items.append({"code": t["code"], "verdict": t["verdict"], "name": name, "word": name.split()[0],
                              "ingredients": sorted(drugtext.product(t["display"]).ingredients)})
            words = words_of(" ".join(r["display"] for r in case.truth["record"]) + " " + case.truth["note"]
                             + " " + " ".join(t["display"] for t in case.truth["items"]))
            yield Sample(cid, case, template_letter(case.truth["items"]), {"items": items, "words": words})
    return Bench("letter", task, samples, _text_verdict(task), LETTER_MUTANTS, LETTER_VARIANTS)


BUILDERS: dict[str, Callable[[random.Random], Bench]] = {
    "extraction": lambda rng: code_list_bench("extraction", rng),
    "reconciliation": lambda rng: code_list_bench("reconciliation", rng),
    "labs": labs_bench, "orders": orders_bench, "write": write_bench, "letter": letter_bench,
}


# ---------------------------------------------------------------- the run
@dataclass
class Outcome:
    """One task's figures, with the failures kept by operator for ``--show``."""

    task: str
    cases: int = 0
    cases_total: int = 0
    originals_failing: list[str] = field(default_factory=list)
    mutants: int = 0
    killed: int = 0
    variants: int = 0
    passed: int = 0
    survivors: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    false_fails: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    per_op: dict[tuple[str, str], list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))  # [ok, of]

    @property
    def kill_rate(self) -> float:
        return self.killed / self.mutants if self.mutants else 1.0

    @property
    def pass_rate(self) -> float:
        return self.passed / self.variants if self.variants else 1.0

    @property
    def meets(self) -> bool:
        return self.kill_rate >= GOAL and self.pass_rate >= GOAL and not self.originals_failing


def _leaves(node: Any, path: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        return {k: v for key, val in node.items() for k, v in _leaves(val, f"{path}.{key}" if path else key).items()}
    if isinstance(node, list):
        return {k: v for i, val in enumerate(node) for k, v in _leaves(val, f"{path}[{i}]").items()}
    return {path: node}


def delta(original: Any, made: Any) -> str:
    """What an operator changed, for ``--show``: the leaves a resource gained or changed
    (``path=value``), or the text an answer gained or changed."""
    if isinstance(original, dict) and isinstance(made, dict):
        old, new = _leaves(original), _leaves(made)
        changed = [f"{k}={json.dumps(v)}" for k, v in new.items() if k not in old or old[k] != v]
        gone = [f"-{k}" for k in old if k not in new]
        return "; ".join(changed + gone) or "(no change)"
    a = original if isinstance(original, str) else json.dumps(original)
    b = made if isinstance(made, str) else json.dumps(made)
    import difflib

    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    if matcher.ratio() < 0.5:  # another answer altogether (an evasive one): shown whole
        return " ".join(b.split())
    ops = matcher.get_opcodes()
    said = [b[j1:j2] if tag != "delete" else f"-{a[i1:i2]}" for tag, i1, i2, j1, j2 in ops if tag != "equal"]
    return " ".join(" | ".join(said).split()) or "(no change)"


def run_bench(bench: Bench, limit: int | None, rng: random.Random, seed: int = 0) -> Outcome:
    """Score each sample's right answer, then every operator's outputs. Each operator draws from
    its own generator (seeded by the seed, the case and the operator's name), so adding an
    operator changes no other's output."""
    out = Outcome(bench.name)
    out.cases_total = len(bench.task.discover())
    samples = bench.samples(None if limit is None else rng)
    if limit is not None:
        samples = itertools.islice(samples, limit)
    for s in samples:
        ok, why = bench.verdict(s, bench.to_original(s.answer))
        if not ok:  # a mutant of a failing answer would prove nothing
            out.originals_failing.append(f"{s.case_id}: {why}")
            continue
        out.cases += 1
        for op in bench.mutants + bench.variants:
            ctx = Ctx(bench.name, s.facts, random.Random(f"{seed}:{bench.name}:{s.case_id}:{op.name}"))
            for made in op.fn(s.answer, ctx):
                passed, why = bench.verdict(s, made if isinstance(made, str) else bench.to_original(made))
                good = passed if op.kind == "variant" else not passed
                out.per_op[op.kind, op.name][0] += good
                out.per_op[op.kind, op.name][1] += 1
                if op.kind == "mutant":
                    out.mutants += 1
                    out.killed += good
                    if not good:
                        out.survivors[op.name].append(f"{s.case_id}: {delta(s.answer, made)[:240]}")
                else:
                    out.variants += 1
                    out.passed += good
                    if not good:
                        out.false_fails[op.name].append(f"{s.case_id}: {why[:240]}")
    return out


def table(outcomes: list[Outcome]) -> str:
    head = (f"{'task':<15} {'cases':>9}  {'mutants killed':>22}  {'variants passed':>22}  verdict")
    lines = [head, "-" * len(head)]
    for o in outcomes:
        verdict = "meets both goals" if o.meets else "MISSES " + " and ".join(
            w for w, bad in (("kill", o.kill_rate < GOAL), ("pass", o.pass_rate < GOAL),
                             (f"{len(o.originals_failing)} right answer(s) fail", bool(o.originals_failing))) if bad)
        lines.append(f"{o.task:<15} {o.cases:>4}/{o.cases_total:<4}  "
                     f"{o.killed:>6}/{o.mutants:<6} {100 * o.kill_rate:6.1f} %  "
                     f"{o.passed:>6}/{o.variants:<6} {100 * o.pass_rate:6.1f} %  {verdict}")
    lines.append(f"goals: >= {100 * GOAL:g} % of mutants killed and >= {100 * GOAL:g} % of natural variants passed, "
                 "per task")
    lines.append("cases: the right answers mutated, of the task's cases (orders: only a case with something due has "
                 "a resource to mutate)")
    return "\n".join(lines)


def details(o: Outcome, per_op_limit: int = 5) -> str:
    lines = [f"\n== {o.task}: by operator (mutants: killed of generated; variants: passed of generated)"]
    for (kind, name), (ok, n) in sorted(o.per_op.items()):
        lines.append(f"  {kind:<8} {name:<28} {ok:>5}/{n:<5}")
    for s in o.originals_failing:
        lines.append(f"  RIGHT ANSWER FAILS: {s}")
    for title, found in (("surviving mutants", o.survivors), ("failing natural variants", o.false_fails)):
        for name, items in sorted(found.items()):
            lines.append(f"  {title} [{name}] ({len(items)}):")
            lines += [f"    {x}" for x in items[:per_op_limit]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--limit", type=int, default=None, help="cases per task, sampled with the seed (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--task", action="append", choices=TASKS, help="only these tasks (repeatable)")
    p.add_argument("--show", action="store_true", help="list surviving mutants and failing variants by operator")
    p.add_argument("--show-limit", type=int, default=5, help="examples per operator under --show")
    args = p.parse_args(argv)
    outcomes = []
    started = time.perf_counter()
    for name in args.task or TASKS:
        rng = random.Random(f"{args.seed}:{name}")
        t0 = time.perf_counter()
        outcomes.append(run_bench(BUILDERS[name](rng), args.limit, rng, args.seed))
        print(f"[{name}: {time.perf_counter() - t0:.1f} s]", file=sys.stderr)
    print(table(outcomes))
    print(f"(seed {args.seed}; {'all cases' if args.limit is None else f'up to {args.limit} cases per task'}; "
          f"{time.perf_counter() - started:.0f} s)")
    if args.show:
        for o in outcomes:
            print(details(o, args.show_limit))
    return 0 if all(o.meets for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
