"""The letter's checkable rubric items (scorers/letter.py): each rule fails on a letter built to
break it, and an equivalent letter that is right passes; the gaming letters (every drug named,
"continue" and "stop" said for each, hedges) fail; the reading grade follows its formula."""

from __future__ import annotations

import pytest

from pytest_groundeval.scorers.letter import check_letter, read_letter, reading_grade, score_letter, syllables

TRUTH = {
    "items": [
        {"code": "197361", "display": "Amlodipine 5 MG Oral Tablet", "verdict": "matched"},
        {"code": "310436", "display": "Galantamine 4 MG Oral Tablet", "verdict": "stopped-but-taking"},
        {"code": "312961", "display": "Simvastatin 20 MG Oral Tablet", "verdict": "unreported"},
        {"code": "849574", "display": "Naproxen sodium 220 MG Oral Tablet", "verdict": "unrecorded"},
    ],
    "record": [
        {"code": "197361", "display": "Amlodipine 5 MG Oral Tablet", "status": "active"},
        {"code": "312961", "display": "Simvastatin 20 MG Oral Tablet", "status": "active"},
        {"code": "310436", "display": "Galantamine 4 MG Oral Tablet", "status": "stopped"},
        {"code": "309362", "display": "Clopidogrel 75 MG Oral Tablet", "status": "completed"},
    ],
    "note": "Current meds: amlodipine 5 mg daily; galantamine 4 mg; naproxen 220 mg as needed.",
}

GOOD = """Dear Ms Lang,

Thank you for going through your medicines with us.
Please keep taking amlodipine 5 mg every day.
Stop taking galantamine: your record shows it was stopped.
Simvastatin is on your list, but you did not mention it, so please check with your doctor.
You take naproxen, which is not on your list. Please talk to your doctor about it.

If you have questions, call the clinic. If you feel very unwell, call 911."""


def failed(letter: str) -> dict[str, str]:
    return {k: d.reason for k, d in check_letter(letter, TRUTH).items() if not d.passed}


def test_the_right_letter_passes_every_check():
    assert failed(GOOD) == {}
    score = score_letter(GOOD, TRUTH)
    assert score.passed and score.metrics["checks_passed"] == 1.0


def test_a_headed_list_letter_passes_too():
    letter = ("Keep taking:\n- Amlodipine 5 mg\n\nStop taking these medicines:\n- Galantamine 4 mg\n\n"
              "Please check these medicines with your doctor:\n- Simvastatin 20 mg\n- Naproxen 220 mg\n\n"
              "Call us with any questions.")
    assert failed(letter) == {}


@pytest.mark.parametrize("wrong, right, dimension", [
    # a changed drug left out
    (GOOD.replace("Stop taking galantamine: your record shows it was stopped.\n", ""), GOOD, "named"),
    # the stopped drug told to continue
    (GOOD.replace("Stop taking galantamine: your record shows it was stopped.", "Keep taking galantamine."), GOOD,
     "stance"),
    (GOOD.replace("Stop taking galantamine", "Keep taking galantamine"), GOOD, "no_contradiction"),
    # a matched drug told to stop
    (GOOD.replace("Please keep taking amlodipine", "Please stop taking amlodipine"), GOOD, "no_contradiction"),
    # an unreported drug told to stop (it is active on the record)
    (GOOD.replace("so please check with your doctor", "so stop taking it and check with your doctor"), GOOD,
     "no_contradiction"),
    # an unrecorded drug with no instruction to check
    (GOOD.replace(" Please talk to your doctor about it.", ""), GOOD, "stance"),
    # an invented drug (neither in the record nor the note)
    (GOOD.replace("every day.", "every day, and warfarin 5 mg at night."), GOOD, "no_invented_drug"),
    # a dose the record does not have
    (GOOD.replace("amlodipine 5 mg", "amlodipine 10 mg"), GOOD, "dose"),
    # a record drug that is only completed, told to continue
    (GOOD.replace("every day.", "every day. Keep taking clopidogrel too."),
     GOOD.replace("every day.", "every day. Your clopidogrel course is finished."), "no_contradiction"),
])
def test_each_rule_fails_a_wrong_letter_and_passes_the_right_one(wrong, right, dimension):
    assert dimension in failed(wrong), failed(wrong)
    assert dimension not in failed(right), failed(right)


def test_hedging_fails():
    """Saying continue and stop for a drug never passes, in either word order."""
    for hedge in ("Continue or stop galantamine, as you prefer.", "Galantamine: keep taking it or stop it."):
        letter = GOOD.replace("Stop taking galantamine: your record shows it was stopped.", hedge)
        assert "no_contradiction" in failed(letter), hedge


def test_naming_every_drug_with_every_instruction_fails():
    """The agent that names every drug of the record and says continue and stop for each."""
    names = ["amlodipine", "galantamine", "simvastatin", "naproxen", "clopidogrel"]
    letter = "\n".join(f"{n.capitalize()}: keep taking it, or stop it, and check with your doctor." for n in names)
    bad = failed(letter)
    assert "no_contradiction" in bad


def test_negations_read_as_their_instruction():
    r = read_letter("Do not stop taking amlodipine. Do not take galantamine any more.", TRUTH)
    assert r.stances("197361") == {"continue"}
    assert r.stances("310436") == {"stop"}


def test_cues_bind_by_word_order_in_one_sentence():
    r = read_letter("Keep taking amlodipine and stop galantamine.", TRUTH)
    assert r.stances("197361") == {"continue"} and r.stances("310436") == {"stop"}


def test_reporting_what_the_patient_said_is_no_instruction():
    letter = GOOD.replace("Simvastatin is on your list, but you did not mention it",
                          "You told us you stopped simvastatin")
    assert "no_contradiction" not in failed(letter)


def test_a_brand_or_abbreviation_names_its_drug():
    truth = {"items": [{"code": "563026", "display": "Diazepam [Valium]", "verdict": "stopped-but-taking"}],
             "record": [{"code": "563026", "display": "Diazepam [Valium]", "status": "stopped"}], "note": "Valium"}
    assert read_letter("Please stop taking Valium.", truth).codes() == {"563026"}


def test_syllable_rule_and_flesch_kincaid():
    assert [syllables(w) for w in ("cat", "table", "whole", "medicine", "stopped", "started", "takes", "doses")] \
        == [1, 2, 1, 3, 1, 2, 1, 2]
    # 6 words, 1 sentence, 6 syllables: 0.39 * 6 + 11.8 * 1 - 15.59
    assert reading_grade("The cat sat on the mat.") == pytest.approx(0.39 * 6 + 11.8 - 15.59, abs=0.01)
    hard = "Discontinue galantamine immediately; antihypertensive pharmacotherapy continues unchanged."
    assert reading_grade(hard) > reading_grade(GOOD) + 5


# letters as a model or a clinician writes them (headed lists with reasons; running prose with
# "continue", "discontinued", "talk to your doctor before restarting", a pronoun's instruction)
REALISTIC = [
"""Dear Ms. Lang,

Thank you for reviewing your medicines with us today. Here is a summary of what we discussed.

Medicines to keep taking:
- Amlodipine 5 mg, once a day, for your blood pressure.

Medicine to stop:
- Galantamine 4 mg. Our records show this medicine was stopped, so please do not take it anymore.

Medicines to check with your doctor:
- Simvastatin 20 mg: this is still on your record, but you told us you are not taking it. Please ask your doctor whether you should be taking it.
- Naproxen 220 mg: you told us you take this, but it is not in our records. Please let your doctor know, and check whether it is safe to keep taking it.

If you have any questions, please call our clinic. If you have chest pain, trouble breathing, or feel very unwell, call 911 right away.

Warm regards,
Your care team""",
"""Hi Arla,

We went over your medication list. Please continue your amlodipine as usual. We noticed you are still taking galantamine, which was discontinued — please stop it. Your record also lists simvastatin; since you said you haven't been taking it, talk to your doctor before restarting. You mentioned taking naproxen over the counter; we'd like your doctor to review that with you.

Questions? Call us at the clinic. For emergencies, call 911.""",
]


@pytest.mark.parametrize("letter", REALISTIC)
def test_realistic_letters_pass(letter):
    assert failed(letter) == {}


def test_deferring_everything_to_the_doctor_fails():
    """Passing every decision to the clinician is not telling the patient what was decided."""
    bad = failed("Please check with your doctor about amlodipine, galantamine, simvastatin and naproxen.")
    assert "stance" in bad and "galantamine" in bad["stance"] and "amlodipine" in bad["stance"]
