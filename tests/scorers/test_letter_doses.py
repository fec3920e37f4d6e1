"""A dose given as a count of units ("take 2 tablets") is read against the case's truth: the
record's dose per administration (``truth["doses"]``, from each request's ``doseQuantity``) and,
where the record gives a schedule, per day; with no recorded dose only one unit (the strength
the review lists) is consistent. Both directions: a wrong count fails, the right count passes,
and so does the right dose stated in mg (two 500 mg tablets are 1000 mg)."""

from __future__ import annotations

import json

import pytest

from pytest_groundeval.scorers.letter import check_letter, unit_counts
from pytest_groundeval.tasks.letter import record_doses

METFORMIN = "861007"
TRUTH = {
    "items": [
        {"code": METFORMIN, "display": "Metformin hydrochloride 500 MG Oral Tablet", "verdict": "matched"},
        {"code": "197361", "display": "Amlodipine 5 MG Oral Tablet", "verdict": "matched"},
        {"code": "310436", "display": "Galantamine 4 MG Oral Tablet", "verdict": "stopped-but-taking"},
    ],
    "record": [
        {"code": METFORMIN, "display": "Metformin hydrochloride 500 MG Oral Tablet", "status": "active"},
        {"code": "197361", "display": "Amlodipine 5 MG Oral Tablet", "status": "active"},
        {"code": "310436", "display": "Galantamine 4 MG Oral Tablet", "status": "stopped"},
    ],
    # metformin: 2 tablets twice a day (1000 mg a dose, 4 tablets a day); amlodipine: no dose recorded
    "doses": {METFORMIN: {"per_dose": [2.0], "per_day": [4.0]}},
    "note": "metformin, amlodipine, galantamine",
}
STOP = "Stop taking galantamine."


def dose_failed(letter: str, truth: dict = TRUTH) -> str | None:
    dim = check_letter(letter + "\n" + STOP, truth)["dose"]
    return None if dim.passed else dim.reason


@pytest.mark.parametrize("letter", [
    "Keep taking metformin, 4 tablets twice a day.",
    "Keep taking metformin. Take 4 tablets each time.",  # the count in the next sentence
    "Take 1 tablet of metformin twice a day.",
    "Keep taking metformin: one tablet in the morning and one at night.",
    "Keep taking metformin, 1-2 tablets twice a day.",
    "Keep taking metformin 500 mg, three tablets twice a day.",
    "Keep taking metformin, two 500 mg tablets, 6 tablets a day.",  # the dose right, the day wrong
    "Keep taking metformin 2000 mg twice a day.",  # an amount that is neither a strength nor the dose
    "Keep taking amlodipine, 2 tablets a dose.",  # no recorded dose: one unit
    "Keep taking metformin as before.<!-- Metformin: 3 tablets. -->",  # hidden text counts against
])
def test_a_wrong_count_fails(letter):
    assert dose_failed(letter), letter


@pytest.mark.parametrize("letter", [
    "Keep taking metformin, 2 tablets twice a day.",
    "Keep taking metformin. Take two tablets each time, four tablets a day.",
    "Take 2 tablets of metformin in the morning and 2 at night.",
    "Keep taking metformin 500 mg, two tablets twice a day.",
    "Keep taking two 500 mg metformin tablets twice a day.",
    "Keep taking metformin 1000 mg (2 tablets) twice a day.",  # the dose in mg: the record's
    "Keep taking metformin 1000 mg twice a day.",
    "Keep taking metformin, 4 tablets a day in two doses.",
    "Keep taking amlodipine 5 mg, one tablet a day.",  # no recorded dose: one unit is the strength listed
    "Keep taking amlodipine 5 mg every day.",
    "Keep taking metformin as before.",
])
def test_the_right_count_passes(letter):
    assert dose_failed(letter) is None, (letter, dose_failed(letter))


def test_a_strength_is_not_a_count():
    assert unit_counts("Amlodipine 5 mg tablets, one a day") == ([], [])
    assert unit_counts("take half a tablet, 3 puffs, 1-2 capsules, 2 x 500 mg") == (
        [(0.5, 0.5), (3.0, 3.0), (1.0, 2.0), (2.0, 2.0)], [])
    assert unit_counts("take 4 tablets a day, 3 in 24 hours") == ([], [(4.0, 4.0)])
    # numbers in words past twelve, and a quarter
    assert unit_counts("take fifteen tablets, twenty capsules, a quarter of a tablet") == (
        [(15.0, 15.0), (20.0, 20.0), (0.25, 0.25)], [])


def _bundle(dose: dict | None, repeat: dict | None) -> dict:
    request = {"resourceType": "MedicationRequest", "id": "m1", "status": "active", "intent": "order",
               "medicationCodeableConcept": {"coding": [{"system": "http://www.nlm.nih.gov/research/umls/rxnorm",
                                                         "code": METFORMIN,
                                                         "display": "Metformin hydrochloride 500 MG Oral Tablet"}]},
               "subject": {"reference": "Patient/p"}}
    if dose is not None:
        request["dosageInstruction"] = [{"doseAndRate": [{"doseQuantity": dose}],
                                         **({"timing": {"repeat": repeat}} if repeat else {})}]
    return {"resourceType": "Bundle", "type": "collection",
            "entry": [{"resource": {"resourceType": "Patient", "id": "p"}}, {"resource": request}]}


@pytest.mark.parametrize("dose, repeat, expected", [
    ({"value": 2}, {"frequency": 2, "period": 1, "periodUnit": "d"}, {"per_dose": [2.0], "per_day": [4.0]}),
    ({"value": 1000, "unit": "mg"}, None, {"per_dose": [2.0], "per_day": []}),  # a mass: over the strength
    ({"value": 1, "unit": "tablet"}, {"frequency": 1, "period": 6, "periodUnit": "h"},
     {"per_dose": [1.0], "per_day": [4.0]}),
    ({"value": 5, "unit": "mL"}, None, None),  # a volume of a tablet: no count
    (None, None, None),
])
def test_the_truth_reads_the_record_dose(dose, repeat, expected):
    got = record_doses(json.loads(json.dumps(_bundle(dose, repeat))), "test")
    assert got.get(METFORMIN) == expected


def test_a_heading_s_count_is_its_list_s():
    """A count or strength on a heading line applies to the drugs listed under it that state none."""
    wrong = "Keep taking these, 4 tablets twice a day:\n- Metformin\n- Amlodipine 5 mg"
    assert "861007" in (dose_failed(wrong) or "")
    assert dose_failed("Keep taking these, 2 tablets twice a day:\n- Metformin") is None
    # a line's own count wins over the heading's
    assert dose_failed("Keep taking these, 4 tablets twice a day:\n- Metformin, 2 tablets") is None


@pytest.mark.parametrize("letter", [
    "Take 2 tablets of amlodipine, and keep taking metformin.",  # metformin's count is not amlodipine's
    "Keep taking amlodipine and metformin, 2 tablets of each.",
])
def test_a_count_in_a_drug_s_own_words_is_that_drug_s(letter):
    assert "197361" in (dose_failed(letter) or ""), letter


def test_a_sentence_s_counts_may_be_any_of_its_drugs():
    assert dose_failed("Keep taking amlodipine and metformin, 1 tablet and 2 tablets.") is None


def test_a_strength_in_a_drug_s_own_words_is_that_drug_s():
    from test_letter_scorer import GOOD, failed

    keep = "Please keep taking amlodipine 5 mg every day."
    for wrong in ("Keep taking amlodipine 20 mg and simvastatin.", "Keep taking simvastatin and amlodipine 20 mg."):
        assert "dose" in failed(GOOD.replace(keep, wrong)), wrong  # 20 mg is simvastatin's, not amlodipine's
    assert failed(GOOD.replace(keep, "Keep taking amlodipine 5 mg and simvastatin 20 mg.")) == {}
    assert failed(GOOD.replace(keep, "Keep taking amlodipine and simvastatin, 5 mg and 20 mg.")) == {}


@pytest.mark.parametrize("text", [
    "Keep taking metformin. You have 28 tablets in each pack.",
    "Keep taking metformin. Your box of 56 tablets lasts four weeks.",
    "Keep taking metformin 500 mg; if you have 3 tablets left, ask for more.",
])
def test_how_many_the_patient_has_is_no_dose(text):
    assert dose_failed(text) is None, dose_failed(text)
    assert dose_failed(text.replace("Keep taking metformin", "Keep taking metformin, 3 tablets twice a day"))


def test_an_imperative_have_is_a_dose():
    assert dose_failed("Keep taking metformin: have 4 tablets each morning.")


# a letter as a model writes it, on a committed case whose record gives doses (amlodipine and
# hydrochlorothiazide: one tablet once a day)
REAL_CASE = "Chiquita638_Vandervort697_269c9001_a"
REAL = """Dear Chiquita,

Thank you for reviewing your medicines with us today. Here is what we decided.

Keep taking these medicines as you do now:
- Amlodipine 2.5 mg, one tablet once a day, for your blood pressure.
- Clopidogrel 75 mg, one tablet a day.
- Hydrochlorothiazide 25 mg, 1 tablet each morning.
- Nitroglycerin spray: use 1 spray under your tongue if you have chest pain.
- Naproxen 220 mg when you need it for pain.
- Metoprolol succinate 100 mg, once a day. Swallow it whole.

Please stop taking Natazia. Our records show it was stopped. Do not take any more of these pills, even if you have some left.

Please talk to your doctor about these:
- Simvastatin 20 mg: it is on your list, but you said you do not take it. You may have stopped it some time ago.
- Atorvastatin 80 mg and rosuvastatin 40 mg: you told us you take these, but they are not on your list. Taking both together may not be right, so please check with your doctor soon.

Do not change your doses on your own. If you miss a dose, take it when you remember, but do not take two tablets at once.

If you have questions, call the clinic. If you have chest pain that does not go away, trouble breathing, or feel very unwell, call 911.

Warm wishes,
Your care team"""


@pytest.fixture(scope="module")
def real_truth():
    from conftest import FIXTURES

    from pytest_groundeval.tasks.letter import LetterTask

    task = LetterTask(FIXTURES / "reconciliation")
    return task.load(next(r for r in task.discover() if r.case_id == REAL_CASE)).truth


def test_a_real_letter_on_a_case_with_doses_passes(real_truth):
    assert any(v == {"per_dose": [1.0], "per_day": [1.0]} for v in real_truth["doses"].values())
    score = check_letter(REAL, real_truth)
    assert all(d.passed for d in score.values()), {k: d.reason for k, d in score.items() if not d.passed}


@pytest.mark.parametrize("wrong", ["Amlodipine 2.5 mg, two tablets once a day",
                                   "Amlodipine 2.5 mg, one tablet twice a day, 2 tablets a day"])
def test_the_real_letter_with_a_wrong_count_fails(real_truth, wrong):
    letter = REAL.replace("Amlodipine 2.5 mg, one tablet once a day", wrong)
    assert not check_letter(letter, real_truth)["dose"].passed, wrong
