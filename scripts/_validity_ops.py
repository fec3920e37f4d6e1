"""The operators of ``bench_validity.py``: small named functions over a task's correct answer.

A *mutant* operator turns a right answer into a clinically WRONG one (its docstring says why a
clinician would call it wrong); a *variant* operator turns it into another RIGHT one, written
the way models write answers. Each takes the answer and a :class:`Ctx` (the case's facts and
a seeded ``random.Random``) and returns a list of new answers (``[]``: not applicable to this
case), so one operator may make several (one per text element, one per drug).

This module holds what the operators share (:class:`Op`, the drug lexicon) and the operators
of the JSON answers (extraction, reconciliation, labs) and of the letter; the FHIR resources'
(write, orders) are in ``_validity_fhir.py``.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class Ctx:
    """What an operator may know about the case: the task, its facts (``facts``: task-specific,
    e.g. the letter's items with their plain names, the drug words of the case), and the seeded
    random generator of this run."""

    task: str
    facts: dict[str, Any]
    rng: random.Random = field(default_factory=lambda: random.Random(0))


@dataclass(frozen=True)
class Op:
    name: str
    kind: str  # "mutant" or "variant"
    fn: Callable[[Any, Ctx], list[Any]]

    @property
    def why(self) -> str:
        return " ".join((self.fn.__doc__ or "").split())


def mutant(fn: Callable[[Any, Ctx], list[Any]]) -> Op:
    return Op(fn.__name__, "mutant", fn)


def variant(fn: Callable[[Any, Ctx], list[Any]]) -> Op:
    return Op(fn.__name__, "variant", fn)


# ---------------------------------------------------------------- the drug lexicon
#: lay / class names -> the ingredient words they name (a class word names every drug of it)
LAY_NAMES: dict[str, frozenset[str]] = {
    "water pill": frozenset({"hydrochlorothiazide", "furosemide", "chlorthalidone", "spironolactone", "triamterene",
                             "bumetanide", "torsemide", "indapamide"}),
    "blood thinner": frozenset({"warfarin", "apixaban", "rivaroxaban", "dabigatran", "clopidogrel", "heparin",
                                "enoxaparin", "edoxaban", "prasugrel", "ticagrelor"}),
    "statin": frozenset({"atorvastatin", "simvastatin", "rosuvastatin", "pravastatin", "lovastatin",
                         "fluvastatin", "pitavastatin"}),
    "thyroid pill": frozenset({"levothyroxine", "liothyronine"}),
    "antidepressant": frozenset({"sertraline", "fluoxetine", "citalopram", "escitalopram", "paroxetine",
                                 "venlafaxine", "duloxetine", "bupropion", "mirtazapine", "trazodone"}),
    "inhaler": frozenset({"albuterol", "fluticasone", "budesonide", "salmeterol", "formoterol", "tiotropium",
                          "ipratropium"}),
    "painkiller": frozenset({"oxycodone", "hydrocodone", "morphine", "tramadol", "fentanyl", "codeine",
                             "meperidine", "tapentadol", "hydromorphone", "acetaminophen", "ibuprofen", "naproxen"}),
}
#: brands -> their ingredient words (kept small: well-known single-ingredient brands)
BRANDS: dict[str, str] = {
    "Coumadin": "warfarin", "Eliquis": "apixaban", "Xarelto": "rivaroxaban", "Plavix": "clopidogrel",
    "Lipitor": "atorvastatin", "Zocor": "simvastatin", "Crestor": "rosuvastatin", "Lasix": "furosemide",
    "Norvasc": "amlodipine", "Zestril": "lisinopril", "Glucophage": "metformin", "Synthroid": "levothyroxine",
    "Zoloft": "sertraline", "Prozac": "fluoxetine", "Lexapro": "escitalopram", "Coreg": "carvedilol",
    "Cozaar": "losartan", "Neurontin": "gabapentin", "Singulair": "montelukast", "Nexium": "esomeprazole",
}
#: same-class groups a swap moves within (one class, different drug)
CLASSES: tuple[tuple[str, ...], ...] = (
    ("atorvastatin", "simvastatin", "rosuvastatin", "pravastatin"),
    ("lisinopril", "enalapril", "ramipril", "benazepril"),
    ("losartan", "valsartan", "irbesartan"),
    ("amlodipine", "nifedipine", "felodipine"),
    ("metoprolol", "atenolol", "propranolol", "carvedilol"),
    ("sertraline", "fluoxetine", "citalopram", "escitalopram", "paroxetine"),
    ("hydrochlorothiazide", "chlorthalidone", "furosemide"),
    ("warfarin", "apixaban", "rivaroxaban"),
    ("metformin", "glipizide", "glyburide"),
    ("omeprazole", "pantoprazole", "esomeprazole"),
    ("oxycodone", "hydrocodone", "morphine", "tramadol"),
    ("alprazolam", "lorazepam", "clonazepam", "diazepam"),
    ("donepezil", "galantamine", "rivastigmine"),
)
#: drugs that alcohol makes dangerous (CNS depressants, opioids)
DEPRESSANTS = frozenset({"oxycodone", "hydrocodone", "morphine", "tramadol", "fentanyl", "codeine", "meperidine",
                         "tapentadol", "hydromorphone", "buprenorphine", "methadone", "alprazolam", "lorazepam",
                         "clonazepam", "diazepam", "zolpidem", "gabapentin", "pregabalin", "carisoprodol"})


def words_of(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.casefold()))


def absent_brand(present: set[str], rng: random.Random) -> tuple[str, str] | None:
    """A brand (with its ingredient) of a drug none of the case's words name."""
    free = sorted((b, i) for b, i in BRANDS.items() if i not in present and b.casefold() not in present)
    return rng.choice(free) if free else None


def absent_lay(present: set[str], rng: random.Random) -> str | None:
    """A lay name of a class none of whose drugs the case has."""
    free = sorted(name for name, members in LAY_NAMES.items() if not members & present)
    return rng.choice(free) if free else None


def class_mate(ingredient: str, present: set[str], rng: random.Random) -> str | None:
    """Another drug of ``ingredient``'s class that the case does not have."""
    for group in CLASSES:
        if ingredient in group:
            others = [d for d in group if d != ingredient and d not in present]
            return rng.choice(others) if others else None
    return None


# ---------------------------------------------------------------- JSON answers
def as_text(obj: dict[str, Any]) -> str:
    return json.dumps(obj)


def _other_number(x: float) -> float:
    """A number a reader tells apart from ``x`` (the answer's value moved by a fifth or more)."""
    other = round(x * 1.25 + 1, 1)
    return int(other) if other == int(other) else other


@mutant
def evasive(obj: Any, ctx: Ctx) -> list[Any]:
    """An evasive non-answer ("I don't know."): it states nothing the case asks for, so it can
    never be right (for the letter: no medication gets its instruction)."""
    return ["I don't know."]


@variant
def fenced(obj: dict[str, Any], ctx: Ctx) -> list[str]:
    """The same JSON in a ```json fence: the answer's values unchanged."""
    return ["```json\n" + json.dumps(obj, indent=2) + "\n```"]


@variant
def prose_wrapped(obj: dict[str, Any], ctx: Ctx) -> list[str]:
    """The same JSON between a friendly opening and closing line that state no value."""
    return ["Here is my answer, based on the record:\n\n" + json.dumps(obj) + "\n\nLet me know if anything is unclear."]


def _said(obj: dict[str, Any], ctx: Ctx) -> str:
    """Prose restating the answer's own values (nothing else)."""
    if ctx.task == "labs":
        return labs_prose(obj)
    items = obj.get("active_medications", obj.get("medications", []))
    if not items:
        return "The patient has no active medications."
    if ctx.task == "extraction":
        return "The active medications are " + "; ".join(f"{i['display']} (RxNorm {i['code']})" for i in items) + "."
    return " ".join(f"{i['display']} (RxNorm {i['code']}) is {i['verdict']}." for i in items)


@variant
def prose_repeating(obj: dict[str, Any], ctx: Ctx) -> list[str]:
    """The JSON after a sentence that repeats the answer's own values (codes, names, verdicts,
    numbers, dates, the flag in words): nothing it says differs from the JSON."""
    return [_said(obj, ctx) + "\n\n```json\n" + json.dumps(obj) + "\n```"]


# ---- extraction and reconciliation: lists of {code, display[, verdict]}
def _items(obj: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    key = "active_medications" if "active_medications" in obj else "medications"
    return key, obj[key]


#: the items a "stopped" remark contradicts (all of extraction's; reconciliation's active ones)
def _active(item: dict[str, Any]) -> bool:
    return item.get("verdict", "matched") in ("matched", "unreported")


@mutant
def extra_key_status_stopped(obj: dict[str, Any], ctx: Ctx) -> list[str]:
    """Every active item also carries ``"status": "stopped"``: the answer says each active
    medication is stopped, the opposite of what it lists it as."""
    key, items = _items(obj)
    if not any(_active(i) for i in items):
        return []
    return [as_text({key: [{**i, "status": "stopped"} if _active(i) else i for i in items]})]


@mutant
def duplicate_stopped(obj: dict[str, Any], ctx: Ctx) -> list[str]:
    """Every active item listed a second time with the display "<name> (stopped)": each active
    medication is said to be both active and stopped."""
    key, items = _items(obj)
    if not any(_active(i) for i in items):
        return []
    out: list[dict[str, Any]] = []
    for i in items:
        out.append(i)
        if _active(i):
            out.append({**i, "display": f"{i['display']} (stopped)"})
    return [as_text({key: out})]


@mutant
def prose_says_stopped(obj: dict[str, Any], ctx: Ctx) -> list[str]:
    """The JSON, then a line saying one listed active medication was stopped: the answer
    contradicts itself about that medication."""
    _, items = _items(obj)
    active = [i for i in items if _active(i)]
    if not active:
        return []
    item = ctx.rng.choice(active)
    return [as_text(obj) + f"\n\nNote: {item['display']} was stopped last month."]


@mutant
def prose_second_code(obj: dict[str, Any], ctx: Ctx) -> list[str]:
    """The JSON, then a hedge naming one more medication the answer does not list (a code the
    case's truth does not hold): two answers, not one."""
    _, items = _items(obj)
    code, display = ctx.facts["other_drug"]
    verdict = ' (verdict: "matched")' if ctx.task == "reconciliation" else ""
    return [as_text(obj) + f"\n\nThe patient may also be on {display} (RxNorm {code}){verdict}."]


@mutant
def wrong_drug_display(obj: dict[str, Any], ctx: Ctx) -> list[str]:
    """One item's display replaced by the brand name of a drug the case does not have (its
    code kept): the answer names another drug for that code."""
    key, items = _items(obj)
    brand = absent_brand(ctx.facts["words"], ctx.rng)
    if not items or brand is None:
        return []
    k = ctx.rng.randrange(len(items))
    return [as_text({key: [{**i, "display": brand[0]} if n == k else i for n, i in enumerate(items)]})]


@mutant
def prose_other_verdict(obj: dict[str, Any], ctx: Ctx) -> list[str]:
    """(reconciliation) The JSON, then a hedge giving one item another verdict: two answers
    for that medication."""
    if ctx.task != "reconciliation":
        return []
    _, items = _items(obj)
    item = ctx.rng.choice(items)
    other = ctx.rng.choice([v for v in ("matched", "unreported", "unrecorded", "stopped-but-taking")
                            if v != item["verdict"]])
    return [as_text(obj) + f"\n\nThough {item['display']} could also be \"{other}\"."]


# ---- labs: one flat object
def labs_prose(obj: dict[str, Any]) -> str:
    if obj.get("no_result"):
        return "I found no result in the period asked about."
    unit = obj.get("unit") or ""
    if "systolic" in obj:
        value = f"{_num(obj['systolic'])}/{_num(obj['diastolic'])} {unit}"
    else:
        value = f"{_num(obj['value'])} {unit}"
    said = f"The most recent result is {value}, from {obj.get('effective')}."
    if obj.get("baseline_value") is not None:
        said += f" The earliest in the period was {_num(obj['baseline_value'])} {unit}, from {obj['baseline_effective']}."
    if obj.get("flag") is not None:
        said += " This meets the criterion." if obj["flag"] else " This does not meet the criterion."
    return said


def _num(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _main_value(obj: dict[str, Any]) -> tuple[str, float] | None:
    for key in ("value", "systolic"):
        if isinstance(obj.get(key), (int, float)):
            return key, float(obj[key])
    return None


@mutant
def hedge_second_value(obj: dict[str, Any], ctx: Ctx) -> list[str]:
    """(labs) The JSON, then prose giving another value for the result ("it may also be ..."):
    two values, not one answer (on a no-result answer, a value it said does not exist)."""
    if ctx.task != "labs":
        return []
    found = _main_value(obj)
    other = _other_number(found[1]) if found else 7.9
    return [as_text(obj) + f"\n\nIt may also be {_num(other)} {obj.get('unit') or ''}, depending on the lab.".replace(" ,", ",")]


@mutant
def hedge_opposite_flag(obj: dict[str, Any], ctx: Ctx) -> list[str]:
    """(labs) The JSON, then prose stating the opposite flag: the answer says the criterion is
    both met and not met."""
    if ctx.task != "labs" or not isinstance(obj.get("flag"), bool):
        return []
    said = "it does not meet the criterion" if obj["flag"] else "it does meet the criterion"
    return [as_text(obj) + f"\n\nOn a second look, {said} (flag {str(not obj['flag']).lower()})."]


@mutant
def hedge_second_date(obj: dict[str, Any], ctx: Ctx) -> list[str]:
    """(labs) The JSON, then prose dating the result on another day: two dates, not one."""
    if ctx.task != "labs" or not isinstance(obj.get("effective"), str):
        return []
    from datetime import date, timedelta

    other = (date.fromisoformat(obj["effective"][:10]) - timedelta(days=41)).isoformat()
    return [as_text(obj) + f"\n\nThe result may instead be the one from {other}."]


@mutant
def extra_key_alternative(obj: dict[str, Any], ctx: Ctx) -> list[str]:
    """(labs) An extra key ``alternative_value`` holding another number: a second answer inside
    the object."""
    if ctx.task != "labs":
        return []
    found = _main_value(obj)
    return [as_text({**obj, "alternative_value": _other_number(found[1]) if found else 7.9})]


@variant
def numbers_as_strings(obj: dict[str, Any], ctx: Ctx) -> list[str]:
    """(labs) The numbers written as JSON strings ("6.8"): the same values."""
    if ctx.task != "labs" or obj.get("no_result"):
        return []
    return [as_text({k: str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
                     for k, v in obj.items()})]


@variant
def reordered(obj: dict[str, Any], ctx: Ctx) -> list[str]:
    """(extraction, reconciliation) The same items in another order: a list of codes is a set."""
    if ctx.task == "labs":
        return []
    key, items = _items(obj)
    if len(items) < 2:
        return []
    shuffled = list(items)
    while shuffled == items:
        ctx.rng.shuffle(shuffled)
    return [as_text({key: shuffled})]


@variant
def display_other_case(obj: dict[str, Any], ctx: Ctx) -> list[str]:
    """(extraction, reconciliation) Each display in lower case ("amlodipine 5 mg oral tablet"):
    the same names (RxNorm displays are not case-sensitive)."""
    if ctx.task == "labs":
        return []
    key, items = _items(obj)
    if not any(i.get("display") for i in items):
        return []
    return [as_text({key: [{**i, "display": i["display"].lower()} if i.get("display") else i for i in items]})]


JSON_MUTANTS = (evasive, extra_key_status_stopped, duplicate_stopped, prose_says_stopped, prose_second_code,
                wrong_drug_display, prose_other_verdict)
LABS_MUTANTS = (evasive, hedge_second_value, hedge_opposite_flag, hedge_second_date, extra_key_alternative)
JSON_VARIANTS = (fenced, prose_wrapped, prose_repeating, reordered, display_other_case)
LABS_VARIANTS = (fenced, prose_wrapped, prose_repeating, numbers_as_strings)
