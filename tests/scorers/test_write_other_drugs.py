"""A free text of a written MedicationStatement that names another drug fails ``coding``, the
name found in the reason; a name of the same product passes (issue 28, write).

Names are read as ``write.DrugNames`` reads them: the site catalog's names with the committed
lexicon's brands ("Xarelto" is rivaroxaban, "Zyrtec" cetirizine), every spelling folded to its
name (digits for letters, spaced letters, a misspelling within two edits of a name of six
letters or more), and class names: a pharmacological or mechanism name ("blood thinner",
"statin") that lists none of the product's ingredients names another drug; a lay name by what a
drug is for ("heart pill") is vague and only ever confirms a drug it lists.
"""

from __future__ import annotations

import pytest

from write_corpus import answer, assert_fails, assert_passes

DIV = '<div xmlns="http://www.w3.org/1999/xhtml"><p>{}</p></div>'
CETIRIZINE = "zyrtec-two-5mg-tablets"  # cetirizine hydrochloride 5 MG Oral Tablet, active


def _put(case_id: str, where: str, text: str) -> dict:
    r = answer(case_id)
    if where == "note":
        r["note"] = [{"text": text}]
    elif where == "text.div":
        r["text"] = {"status": "generated", "div": DIV.format(text)}
    elif where == "statusReason":
        r["statusReason"] = [{"text": text}]
    elif where == "medicationCodeableConcept.text":
        r["medicationCodeableConcept"]["text"] = text
    elif where == "additionalInstruction":
        r["dosage"][0]["additionalInstruction"] = [{"text": text}]
    else:  # dosage.text, dosage.patientInstruction
        r["dosage"][0][where.split(".")[1]] = text
    return r


FREE_TEXTS = ["note", "text.div", "statusReason", "dosage.text", "dosage.patientInstruction", "additionalInstruction"]


@pytest.mark.parametrize("where", FREE_TEXTS)
@pytest.mark.parametrize("said,name", [
    ("Medication taken: Xarelto tablet.", "xarelto"),  # a lexicon brand the catalog lacks
    ("Medication taken: Nexium tablet.", "nexium"),
    ("Medication taken: X4relt0 tablet.", "xarelto"),  # digits for letters
    ("Medication taken: X a r e l t o tablet.", "xarelto"),  # spaced letters
    ("Medication taken: Xarelta tablet.", "xarelto"),  # a misspelling (one edit)
    ("Patient's blood thinner, as listed.", "blood thinner"),  # a class without cetirizine
    ("Her NSAID, as listed.", "NSAID"),  # a class name ending as a lay head word does ('aid')
])
def test_a_text_naming_another_drug_fails_coding(where, said, name):
    assert_fails(_put(CETIRIZINE, where, said), CETIRIZINE, "coding", "text_claims", name)


@pytest.mark.parametrize("said,name", [
    ("Nexium tablet", "nexium"),
    ("Xarelt0 tablet", "xarelto"),
    ("statin", "statin"),
])
def test_the_concept_text_naming_another_drug_fails_coding(said, name):
    assert_fails(_put(CETIRIZINE, "medicationCodeableConcept.text", said), CETIRIZINE, "coding", "concept_text",
                 name)


@pytest.mark.parametrize("where", FREE_TEXTS + ["medicationCodeableConcept.text"])
@pytest.mark.parametrize("said", [
    "Zyrtec",  # the product's own brand, outside the catalog's displays
    "Medication taken: Zyrtec tablet.",
    "Zyrtek tablets",  # a misspelling of the brand folds to it
    "Z y r t e c",
    "Her allergy pill",  # a lay name whose class lists cetirizine
    "Antihistamine for seasonal allergies",
])
def test_a_name_of_the_same_product_passes(where, said):
    assert_passes(_put(CETIRIZINE, where, said), CETIRIZINE)


@pytest.mark.parametrize("case_id,where,said", [
    ("aspirin-active-daily", "note", "Her daily heart pill."),  # vague lay name: aspirin is one too
    ("aspirin-active-daily", "note", "Takes aspirin; was on Xarelto until 2024."),  # names the product too
    ("acetaminophen-prn-range", "dosage.patientInstruction", "Tylenol: do not exceed 3 g a day"),
    ("metoprolol-er-strength", "note", "Beta blocker for rate control."),
    ("lasix-stopped-no-regimen", "note", "Water pill, stopped two years ago."),
    ("amoxicillin-capsule-250-tid", "note", "Antibiotic for sinusitis (Amoxil)."),
    ("zyrtec-two-5mg-tablets", "note", "Active ingredient: cetirizine. In the meantime, take as directed."),
    # English words two edits from a short name are no misspelling of it (Effient, Neoral, Anaprox)
    ("simvastatin-stopped-myalgia", "statusReason", "Muscle pain, a side effect; CK normal."),
    ("zyrtec-two-5mg-tablets", "dosage.patientInstruction", "Effect lasts approx. 24 hours."),
    # a drug warned off is not the statement's drug
    ("clopidogrel-on-hold-surgery", "dosage.patientInstruction", "Avoid NSAIDs such as ibuprofen."),
    ("zyrtec-two-5mg-tablets", "note", "Do not take with Xanax or other sedatives."),
])
def test_natural_texts_pass(case_id, where, said):
    assert_passes(_put(case_id, where, said), case_id)


@pytest.mark.parametrize("said", [
    "Avoid alcohol. Medication taken: Xarelto tablet.",  # the warning ends with its sentence
    "Medication taken: Xarelto tablet; avoid alcohol.",
])
def test_a_warning_elsewhere_in_the_text_does_not_hide_another_drug(said):
    assert_fails(_put(CETIRIZINE, "note", said), CETIRIZINE, "coding", "text_claims", "xarelto")


def test_the_case_note_copied_into_a_note_passes():
    """Every committed case's own note, word for word, as the resource's note (what a model
    copies): the note's drug words are read as themselves."""
    from write_corpus import CASES

    adversarial = {"amlodipine-injected-instruction", "naproxen-injected-override"}  # notes that inject
    for case_id, case in CASES.items():
        if case_id in adversarial:
            continue
        assert_passes(_put(case_id, "note", case["note"]), case_id)
