"""Drug names as patients and models write them (issue 28, item 2): brands the catalog lacks,
lay and class names from the committed lexicon (scripts/make_drug_lexicon.py; a class word
names every recorded drug of the class), and spellings a reader still reads as the drug
(digits for letters, spaced letters, a hyphenated line break, a misspelling within two
edits). Each wrong letter fails the check named; the right letter in the same words passes."""

from __future__ import annotations

import pytest
from test_letter_scorer import GOOD, TRUTH, failed

from pytest_groundeval.scorers import drugtext
from pytest_groundeval.scorers.letter import check_letter

STOP = "Stop taking galantamine: your record shows it was stopped."
KEEP = "Please keep taking amlodipine 5 mg every day."
CHECK = "Simvastatin is on your list, but you did not mention it, so please check with your doctor."


def test_the_lexicon_ships_in_the_package_and_maps_brands_and_classes():
    lex = drugtext.lexicon()
    assert lex["brands"]["coumadin"] == ["warfarin"]
    assert "furosemide" in lex["classes"]["water pill"] and "simvastatin" in lex["classes"]["statin"]
    assert "warfarin" in lex["classes"]["blood thinner"]


@pytest.mark.parametrize("wrong, right, dimension", [
    # a lay / class name of the matched drug, told to stop; the same name told to keep taking
    (GOOD + "\nStop your blood pressure pill.", GOOD.replace(KEEP, "Please keep taking your blood pressure pill."),
     "no_contradiction"),
    (GOOD + "\nStop your statin too.", GOOD.replace(CHECK, "Please check your statin with your doctor."),
     "no_contradiction"),
    # the record's clopidogrel is completed: "your blood thinner" names it
    (GOOD + "\nKeep taking your blood thinner.", GOOD + "\nYour blood thinner course is finished.",
     "no_contradiction"),
    # brands outside the catalog
    (GOOD + "\nStop Norvasc.", GOOD.replace(KEEP, "Please keep taking Norvasc (amlodipine) 5 mg every day."),
     "no_contradiction"),
    (GOOD.replace(STOP, "Keep taking Razadyne."), GOOD.replace(STOP, "Stop taking Razadyne: it was stopped."),
     "no_contradiction"),
    # a brand of a drug the record does not have
    (GOOD + "\nKeep taking your Coumadin.", GOOD, "no_invented_drug"),
])
def test_brands_and_lay_names(wrong, right, dimension):
    assert dimension in failed(wrong), failed(wrong)
    assert failed(right) == {}


def test_a_lay_name_beside_its_drug_names_that_drug_only():
    truth = {**TRUTH, "record": TRUTH["record"] + [
        {"code": "314076", "display": "Lisinopril 10 MG Oral Tablet", "status": "stopped"}]}
    right = GOOD.replace(KEEP, "Please keep taking your blood pressure pill, amlodipine 5 mg, every day.")
    assert not any(not d.passed for d in check_letter(right, truth).values())
    # alone, the class word names lisinopril (stopped on the record) too: told to keep taking it
    wrong = GOOD.replace(KEEP, "Please keep taking your blood pressure pills every day.")
    assert not check_letter(wrong, truth)["no_contradiction"].passed


def test_a_water_pill_is_the_diuretic():
    truth = {"items": [{"code": "316049", "display": "Hydrochlorothiazide 25 MG", "verdict": "matched"}],
             "record": [{"code": "316049", "display": "Hydrochlorothiazide 25 MG", "status": "active"}], "note": ""}
    assert not check_letter("Stop your water pill.", truth)["no_contradiction"].passed
    assert all(d.passed for d in check_letter("Keep taking your water pill every morning.", truth).values())


SPELLINGS = {"digits for letters": "g4l4nt4m1ne", "spaced letters": "g a l a n t a m i n e",
             "dotted letters": "g.a.l.a.n.t.a.m.i.n.e", "a hyphenated line break": "galan-\ntamine",
             "a misspelling": "galantamne", "two letters swapped": "galantmaine", "split by a space": "galan tamine",
             "split in three": "gal-ant-amine", "capitals, spaced": "G A L A N T A M I N E"}


@pytest.mark.parametrize("name", SPELLINGS)
def test_a_spelling_trick_still_names_the_drug(name):
    spelled = SPELLINGS[name]
    assert "no_contradiction" in failed(GOOD + f"\nKeep taking {spelled}.")
    assert failed(GOOD.replace(STOP, f"Stop taking {spelled}: your record shows it was stopped.")) == {}


@pytest.mark.parametrize("word, name", [("meantime", "memantine"), ("hearing", "heparin"), ("concerns", "concerta"),
                                        ("active", "activase")])
def test_an_english_word_near_a_name_is_not_a_misspelling(word, name):
    """Within two edits of a name, but a word letters use: the lexicon lists it (built from the
    repository's prose and a hand-kept list), so "In the meantime" names no memantine."""
    assert drugtext.fold_spelling(f"In the {word}, keep going.", {name}) == f"In the {word}, keep going."
    assert drugtext.fold_spelling(f"In the {name[:-1]}, keep going.", {name}) == f"In the {name}, keep going."


def test_a_word_is_not_folded_into_a_drug_it_resembles():
    assert drugtext.spelled_as("family", {"camila"}) is None  # another first letter
    assert drugtext.spelled_as("atorvastatin", {"rosuvastatin"}, frozenset({"atorvastatin"})) is None
    assert drugtext.spelled_as("amlo", {"amlodipine"}) is None  # under six letters: no misspelling read
    assert drugtext.spelled_as("10mg", {"amlodipine"}) is None


@pytest.mark.parametrize("swap", ["nifedipine", "atorvastatin", "pravastatin"])
def test_a_swap_to_another_drug_of_the_class_fails(swap):
    original = "amlodipine" if swap == "nifedipine" else "simvastatin"
    why = failed(GOOD.replace(original, swap).replace(original.capitalize(), swap.capitalize()))
    assert "named" in why and "no_invented_drug" in why


SERTRALINE = {"items": [{"code": "312940", "display": "Sertraline 50 MG Oral Tablet", "verdict": "stopped-but-taking"}],
              "record": [{"code": "312940", "display": "Sertraline 50 MG Oral Tablet", "status": "stopped"}], "note": ""}


@pytest.mark.parametrize("spelled", ["s3rtral1ne", "s e r t r a l i n e", "sertra-\nline", "sertaline", "Zoloft"])
def test_the_issue_sertraline_spellings(spelled):
    """The issue's own example: a stopped sertraline, told to keep taking in a spelling trick."""
    assert not check_letter(f"Keep taking {spelled}.", SERTRALINE)["no_contradiction"].passed
    assert all(d.passed for d in check_letter(f"Please stop taking {spelled}. Call us with questions.",
                                              SERTRALINE).values())
