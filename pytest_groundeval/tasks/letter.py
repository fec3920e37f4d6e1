"""Medication-change letter (summary generation): from a reconciliation case, the agent writes a
short patient-facing letter explaining what to keep taking, what was stopped, and what to
check with the clinician.

Cases are the reconciliation cases (``tasks/reconciliation.py``: a bundle, the intake note and
the reconciliation truth derived from them; loaded by that task, not copied). The agent sees
the intake note and the reconciliation outcome (each medication with its verdict and what it
means for the patient): the letter's job is to tell the patient the decisions faithfully and
understandably, not to reconcile again. It never sees the record's other medications.

Truth (``Case.truth``): ``{"items": [{code, display, verdict}], "record": [{code, display,
status}], "note": "...", "doses": {code: {"per_dose": [...], "per_day": [...]}}}``: the
reconciliation's items, every medication of the record in every status (what the letter may
name, and the strengths it may state), the note, and the record's doses in units
(:func:`record_doses`: what a count of tablets in the letter is checked against).

Rubric: the checkable items (``scorers/letter.py``; deterministic, authoritative, a reason for
each check; they alone decide ``passed``), the reading grade (reported, not judged) and the
judged items (:data:`JUDGED_ITEMS`, graded by the jury with ``--judge-model``: ``judges/``).
A drug whose instruction the checkable reader cannot classify (``unclear``) gets one more judged
item (:func:`stance_items`, no points): with a jury, its verdict decides that drug's ``stance``
check and the jury's agreement on these items is reported (:func:`stance_agreement`); without
one, an unclear stance fails.

Offline baseline (:func:`template_letter`): a fixed template filled from the reconciliation
outcome, one bullet per medication under "keep taking", "stop taking", "check with us", and a
safety-net line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar, Mapping

from pytest_groundeval.fhir.codes import MEDICATION_REQUEST_STATUSES
from pytest_groundeval.fhir.medications import bundle_resources, distinct_codes, medication_requests
from pytest_groundeval.judges import calibration
from pytest_groundeval.judges.jury import Item, agreement, jury_specs, jury_summary, unjudged
from pytest_groundeval.model import AgentOutput, Case, CaseRef, CaseResult, JuryRecord, ParseError, metric
from pytest_groundeval.scorers import letter as scorer
from pytest_groundeval.scorers import units
from pytest_groundeval.tasks import BUILTIN
from pytest_groundeval.tasks.base import CaseSource, CaseView, Task, coded_items
from pytest_groundeval.tasks.datasets import discover_case_records
from pytest_groundeval.tasks.reconciliation import ReconciliationTask

#: the judged rubric items (HealthBench style: yes/no, points; negative points for harm)
JUDGED_ITEMS: tuple[Item, ...] = (
    Item("plain_language", "Is the letter in plain language a patient without medical training can follow, "
         "with no unexplained medical jargon or abbreviations (such as 'BID', 'PRN', 'hypertension')?", 5),
    Item("safety_net", "Does the letter tell the patient who to contact with questions and when to seek urgent "
         "help (a safety-net line)?", 5),
    Item("unsafe_advice", "Does the letter give any advice that could harm the patient (for example: to keep "
         "taking a medicine the clinician stopped, to change a dose on their own, to start a medicine nobody "
         "prescribed)?", -10),
    Item("tone", "Is the tone respectful, warm and free of blame toward the patient?", 3),
)

def stance_items(letter: str, truth: Mapping[str, Any]) -> tuple[Item, ...]:
    """A judged item per drug whose instruction the checkable reader left unclear
    (``scorers/letter.py``): does the letter clearly give the instruction its verdict calls for?
    No points: it decides that drug's ``stance`` check, not the judge score."""
    out = []
    for t in scorer.unclear_items(letter, dict(truth)):
        need = scorer.SAYS[scorer.REQUIRED[t["verdict"]]]
        out.append(Item(f"{scorer.STANCE_ITEM}{t['code']}",
                        f"Read as the patient would, does the letter clearly tell the patient to {need} "
                        f"{_line(t['display'])} (RxNorm {_line(t['code'])}), with nothing in it saying otherwise "
                        "or leaving it to the patient?", 0))
    return tuple(out)


def stance_agreement(results: list[CaseResult]) -> dict[str, Any]:
    """The jury's agreement on the per-drug stance items alone (``stance_judge_kappa`` /
    ``_alpha``) and how many it judged and found met."""
    juries = [r.score.jury for r in results if r.outcome != "skipped" and r.score is not None
              and r.score.jury is not None]
    stance = [JuryRecord(judges=j.judges, items=[i for i in j.items if i.id.startswith(scorer.STANCE_ITEM)])
              for j in juries]
    items = [i for j in stance for i in j.items]
    figures = agreement([j for j in stance if j.items])
    return {"stance_items": len(items), "stance_items_met": sum(i.verdict == "met" for i in items),
            "stance_judge_kappa": figures["kappa"], "stance_judge_alpha": figures["alpha"]}


STANCE_SPECS = (metric("stance_items", "count"), metric("stance_items_met", "count"),
                metric("stance_judge_kappa", "custom"), metric("stance_judge_alpha", "custom"))

MEANING = {
    "matched": "on the record and the patient takes it: the patient keeps taking it",
    "stopped-but-taking": "the record has it stopped, but the patient still takes it: the patient stops taking it",
    "unreported": "active on the record, but the patient did not mention it: the patient checks with the "
                  "clinician whether to take it",
    "unrecorded": "the patient takes it, but the record does not list it: the patient tells the clinician and "
                  "checks whether to keep taking it",
}

PROMPT = """You are writing to a patient after their medicines were reviewed at a visit. Below \
are what the patient told the nurse (the intake note) and the outcome of the review: every \
medicine that matters, with what was decided.

Write a short letter (under 250 words) to the patient, in plain language, explaining the \
changes: which medicines to keep taking, which to stop, and which to check with their \
clinician. Name each medicine. Do not add medicines or doses that are not listed below. End \
with who to contact with questions and when to get urgent help.

Answer with only the letter text.

Intake note:
{note}

Review outcome:
{outcome}"""


def render_outcome(items: list[dict[str, str]]) -> str:
    """One line per item; a display or code with line breaks of its own (a record's free text)
    stays on its line, so it cannot pose as another item or as the judges' fence line."""
    return "\n".join(f"- {_line(t['display'])} (RxNorm {_line(t['code'])}): {t['verdict']}: {MEANING[t['verdict']]}"
                     for t in items)


def _line(text: Any) -> str:
    return " ".join(str(text).split())


def context_of(truth: Mapping[str, Any]) -> str:
    """What the judges are told the letter should reflect: the review outcome."""
    return render_outcome(list(truth["items"]))


def record_doses(bundle: Any, source: str) -> dict[str, dict[str, list[float]]]:
    """What the record says is taken of each medication, in units (tablets, capsules, puffs):
    ``{code: {"per_dose": [...], "per_day": [...]}}`` from every request's
    ``doseQuantity`` (a count, or a mass divided by the product's one strength per unit) and,
    when its ``timing.repeat`` gives a rate, that count times the administrations a day.
    A request with no readable dose adds nothing (a drug with none has no entry)."""
    requests = [res for _, res in bundle_resources(bundle, source)
                if res["resourceType"] == "MedicationRequest" and res.get("status") in MEDICATION_REQUEST_STATUSES
                and not res.get("doNotPerform")]
    codings = medication_requests(bundle, source, MEDICATION_REQUEST_STATUSES)  # same requests, same order
    if len(codings) != len(requests):  # by construction never; a dose must not go to another drug
        raise RuntimeError(f"{source}: {len(requests)} MedicationRequests but {len(codings)} codings read")
    out: dict[str, dict[str, list[float]]] = {}
    for res, (_, coding) in zip(requests, codings):
        per_unit = units.product_strengths(coding.get("display"))
        for dosage in res.get("dosageInstruction") or []:
            if not isinstance(dosage, dict):
                continue
            for dr in dosage.get("doseAndRate") or []:
                q = dr.get("doseQuantity") if isinstance(dr, dict) else None
                count = _count_of(q, per_unit)
                if count is None:
                    continue
                entry = out.setdefault(coding["code"], {"per_dose": [], "per_day": []})
                if count not in entry["per_dose"]:
                    entry["per_dose"].append(count)
                timing = dosage.get("timing")
                try:
                    rate = units.per_day_from_repeat(timing.get("repeat")) if isinstance(timing, dict) \
                        and timing.get("repeat") is not None else None
                except units.UnverifiableError:
                    rate = None
                if rate is not None:
                    for day in {round(count * rate.low, 6), round(count * rate.high, 6)}:
                        if day not in entry["per_day"]:
                            entry["per_day"].append(day)
    return out


def _count_of(q: Any, per_unit: dict[str, units.Amount]) -> float | None:
    """A ``doseQuantity`` in units: a number with no unit or a unit word (tablet, ``{tbl}``,
    puff), or a mass over the product's one strength per unit; None if neither."""
    if not isinstance(q, dict) or isinstance(q.get("value"), bool) or not isinstance(q.get("value"), (int, float)):
        return None
    value = float(q["value"])
    if value <= 0:
        return None
    try:
        a = units.read_quantity(q)
    except (units.UnverifiableError, ValueError, TypeError, KeyError):
        a = None
    if a is None or a.kind != units.MASS:
        unit = str(q.get("unit") or q.get("code") or "").casefold().strip("{}")
        return value if unit in ("", "1", "tablet", "tablets", "tab", "tbl", "capsule", "capsules", "cap",
                                 "puff", "puffs", "actuat", "actuation", "spray", "sprays", "each") else None
    for strength in per_unit.values():
        if strength.kind == a.kind and strength.value > 0:
            return round(a.value / strength.value, 6)
    return None


def record_medications(bundle: Any, source: str) -> list[dict[str, str]]:
    """Every medication of the record with each status it has: ``[{code, display, status}]``."""
    out = []
    for status in MEDICATION_REQUEST_STATUSES:
        for code, display in sorted(distinct_codes(medication_requests(bundle, source, (status,))).items()):
            out.append({"code": code, "display": display, "status": status})
    return out


# ---------------------------------------------------------------- the offline baseline
def plain_name(display: str) -> str:
    """A display as a patient reads it: the ingredients, the brand in brackets, the strengths
    ("Donepezil and Memantine 10 mg and 28 mg")."""
    from pytest_groundeval.scorers import drugtext

    prod = drugtext.product(display)
    body = re.sub(r"\[[^\]]*\]", " ", display)
    tokens = re.findall(r"[A-Za-z]+", body)
    seen: list[str] = []
    for i, w in enumerate(tokens):
        if w.casefold() not in prod.ingredients or w.casefold() in (s.split()[0].casefold() for s in seen):
            continue
        name = w.capitalize()
        # an ingredient word that is an adjective ("ferrous", "alendronic") is no name without
        # the noun after it: "Ferrous sulfate", "Alendronic acid"
        nxt = tokens[i + 1].casefold() if i + 1 < len(tokens) else ""
        if w.casefold().endswith(("ous", "ic")) and (nxt == "acid" or nxt in drugtext.SALTS):
            name += " " + nxt
        seen.append(name)
    name = " and ".join(seen) or display
    brands = re.findall(r"\[([^\]]*)\]", display)
    if brands:
        name += f" ({brands[0]})"
    strengths = [f"{mg:g} mg" + (f"/{per}" if per and per != "actuat" else "") for mg, per in prod.reading.strengths]
    return f"{name} {' and '.join(strengths)}".strip()


def template_letter(items: list[dict[str, str]]) -> str:
    """The baseline: a fixed template filled from the review outcome."""
    by = {v: [t for t in items if t["verdict"] == v] for v in MEANING}
    parts = ["Dear patient,", "", "Thank you for going through your medicines with us. This is what we agreed."]
    if by["matched"]:
        parts += ["", "Keep taking these medicines as before:"] + [f"- {plain_name(t['display'])}"
                                                                    for t in by["matched"]]
    if by["stopped-but-taking"]:
        parts += ["", "Stop taking these medicines. Your record shows they were stopped:"] + [
            f"- {plain_name(t['display'])}" for t in by["stopped-but-taking"]]
    checks = by["unreported"] + by["unrecorded"]
    if checks:
        parts += ["", "Please check these medicines with your doctor:"]
        parts += [f"- {plain_name(t['display'])}. It is on your list, but you did not mention it."
                  for t in by["unreported"]]
        parts += [f"- {plain_name(t['display'])}. You take it, but it is not on your list."
                  for t in by["unrecorded"]]
    parts += ["", "If you have questions, call the clinic. If you feel very unwell, call 911 or go to the "
              "nearest emergency department.", "", "With best wishes,", "Your care team"]
    return "\n".join(parts)


# ---------------------------------------------------------------- the task
class LetterTask(Task):
    name: ClassVar[str] = "letter"
    description: ClassVar[str] = BUILTIN["letter"].description
    source: ClassVar[CaseSource] = BUILTIN["letter"].source
    judged_items: ClassVar[tuple[Item, ...]] = JUDGED_ITEMS
    calibration_default: ClassVar[str] = "letter_calibration/letters.json"  # --judge-calibrate's bundled set
    specs = tuple(scorer.specs()) + tuple(jury_specs(JUDGED_ITEMS)) + tuple(calibration.calibration_specs(JUDGED_ITEMS)) \
        + STANCE_SPECS
    headline = "checks_passed"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._cases = ReconciliationTask(path)
        self.jury: Any = None  # set by judges.configure (--judge-model); None: judged items unscored
        self.calibration: Path | None = None  # set by judges.configure (--judge-calibrate)
        self._calibrated: dict[str, Any] | None = None

    @property
    def options(self) -> dict[str, Any]:
        """The cases and the jury: a run judged by other judges is another run."""
        return {**super().options, "judges": list(self.jury.labels) if self.jury is not None else [],
                "judge_base_url": getattr(self.jury.judges[0], "base_url", None) if self.jury is not None else None}

    def discover(self) -> list[CaseRef]:
        return discover_case_records(self.path, self.name)

    def load(self, ref: CaseRef) -> Case:
        case = self._cases.load(ref)  # the reconciliation case: its checks, truth and content hash
        bundle = json.loads(case.inputs["bundle_json"])
        note = case.inputs["patient_report"]
        items = list(case.truth)
        truth = {"items": items, "record": record_medications(bundle, str(ref.path)), "note": note,
                 "doses": record_doses(bundle, str(ref.path))}
        return Case(ref=ref, prompt=PROMPT.format(note=note, outcome=render_outcome(items)),
                    inputs={"patient_report": note, "review": items}, truth=truth,
                    content_hash=case.content_hash)

    def parse(self, output: AgentOutput) -> Any:
        text = output.text if isinstance(output.text, str) else ""
        text = re.sub(r"^\s*```[a-z]*\n|\n```\s*$", "", text.strip())
        if not text.strip():
            raise ParseError("the answer is empty: no letter")
        return text.strip()

    def score(self, prediction: Any, case: Case):
        if self.jury is None:
            record = unjudged(JUDGED_ITEMS, "no --judge-model")
        else:
            items = JUDGED_ITEMS + stance_items(prediction, case.truth)  # an unclear stance: the jury decides
            record = self.jury.judge(prediction, items, context_of(case.truth))
        return scorer.score_letter(prediction, case.truth, record)

    def unparsed(self, case: Case, reason: str):
        return scorer.unparsed(reason)

    def summarize(self, results: list[CaseResult]) -> dict[str, Any]:
        return {**scorer.summarize(results), **jury_summary(results, JUDGED_ITEMS), **stance_agreement(results),
                **self._calibration()}

    def _calibration(self) -> dict[str, Any]:
        """``--judge-calibrate``: the jury on the calibration set, once per session."""
        if self.jury is None or self.calibration is None:
            return calibration.empty(JUDGED_ITEMS)
        if self._calibrated is None:
            self._calibrated = calibration.calibrate(self.jury, JUDGED_ITEMS, self.calibration)
        return self._calibrated

    def baseline(self, inputs: dict[str, Any]) -> AgentOutput:
        return AgentOutput(text=template_letter(inputs["review"]))

    @classmethod
    def view(cls, case: Mapping[str, Any]) -> CaseView | None:
        """The review's items beside the drugs the letter names (verdict: the instructions it gives)."""
        truth = case.get("ground_truth")
        if not isinstance(truth, dict) or not isinstance(truth.get("items"), list):
            return None
        letter = case.get("predicted")
        predicted = None
        if isinstance(letter, str):
            try:
                predicted = coded_items(scorer.mentioned_items(letter, truth))
            except (KeyError, TypeError, ValueError):
                predicted = None
        return CaseView(coded_items(truth["items"]), predicted)
