"""Issue 28 (extraction): the text around the answer says no listed medication is not active.
Before, such a remark was read only by the first word of the display and in "sentences" that
a decimal point ended, so "Digoxin 0.125 MG Oral Tablet was stopped last month." and the long
multi-ingredient names passed. A remark is now said of the drugs named on its side of the
sentence (a listed code or display, an ingredient, a brand from the lexicon, spelling folded);
a stop said of a drug the answer does not list is no contradiction."""

from __future__ import annotations

import json

import pytest

from pytest_groundeval.model import ParseError
from pytest_groundeval.scorers.extraction import score_extraction
from pytest_groundeval.tasks.extraction import parse_answer

DIGOXIN = {"code": "197604", "display": "Digoxin 0.125 MG Oral Tablet"}
NORCO = {"code": "856999", "display": "Acetaminophen 325 MG / HYDROcodone Bitartrate 7.5 MG Oral Tablet"}
AMLO = {"code": "197361", "display": "Amlodipine 5 MG Oral Tablet"}
SIMVI = {"code": "316672", "display": "Simvistatin 10 MG"}  # Synthea's spelling
TRUTH = [DIGOXIN, NORCO, AMLO, SIMVI]


def answer(prose_after="", prose_before=""):
    return prose_before + json.dumps({"active_medications": TRUTH}) + prose_after


WRONG = {
    "a display with a decimal": "\n\nNote: Digoxin 0.125 MG Oral Tablet was stopped last month.",
    "a long multi-ingredient display": "\n\nNote: Acetaminophen 325 MG / HYDROcodone Bitartrate 7.5 MG Oral Tablet "
                                       "was stopped last month.",
    "an ingredient of a combination": "\nThe hydrocodone was discontinued.",
    "a brand (lexicon)": "\nLanoxin was stopped by cardiology.",
    "a brand spelt with digits": "\nL4n0xin is no longer active.",
    "the code": "\nRxNorm 197604 is on hold.",
    "two drugs, one remark": "\nBoth amlodipine and digoxin were discontinued.",
    "the remark first": "\nDiscontinued: amlodipine.",
    "an unlisted drug beside the remark": "\nDigoxin, unlike atorvastatin, was stopped.",
    "in the clause after a but": "\nAtorvastatin is gone, but amlodipine was also discontinued.",
    "other words for a stop": "\nDigoxin was ceased and the patient came off amlodipine.",
    "not any more": "\nThe patient does not use Lanoxin anymore.",
    "the right spelling of a misspelt listed display": "\nSimvastatin was discontinued.",
    "a drug not listed beside a listed one": "\nAtorvastatin and digoxin were stopped.",
}


@pytest.mark.parametrize("prose", WRONG.values(), ids=list(WRONG))
def test_prose_saying_a_listed_drug_is_not_active_is_a_hedge(prose):
    with pytest.raises(ParseError, match="hedge: the text around the answer .* which the answer lists as active"):
        parse_answer(answer(prose))


RIGHT = {
    "no prose": "",
    "prose repeating the displays and codes": "\n\nActive: Digoxin 0.125 MG Oral Tablet (RxNorm 197604); "
                                              "Acetaminophen 325 MG / HYDROcodone Bitartrate 7.5 MG Oral Tablet "
                                              "(RxNorm 856999); Amlodipine 5 MG Oral Tablet (RxNorm 197361).",
    "a stop of a drug not listed": "\n\nAtorvastatin was stopped, so it is not listed.",
    "a stop of a drug not listed, then a listed one": "\nAtorvastatin was stopped, so only digoxin, amlodipine and "
                                                      "the hydrocodone combination remain.",
    "a list of stopped drugs not listed": "\nStopped (left out): atorvastatin, lisinopril.",
    "other words for a stop, of a drug not listed": "\nAtorvastatin was ceased; the patient came off lisinopril.",
    "the listed ones said active": "\nDigoxin, amlodipine and Norco are active.",
    "a stop in another clause": "\nDigoxin and amlodipine are active, but atorvastatin was stopped.",
    "a status word qualifying the work": "\nHere is the completed list: digoxin, amlodipine and the hydrocodone "
                                         "combination; I checked the historical records too.",
}


@pytest.mark.parametrize("prose", RIGHT.values(), ids=list(RIGHT))
def test_prose_that_says_nothing_against_a_listed_drug_passes(prose):
    assert score_extraction(parse_answer(answer(prose)), TRUTH).passed
