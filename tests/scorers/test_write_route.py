"""The route of administration (issue 15 item 3): when the case documents a route (the note's
words, else the product's RxNorm dose form: ``pytest_groundeval/scorers/routes.py``), a
``dosage.route`` that contradicts it, or that cannot be read, fails constraints; the route
written in any readable way passes. On the committed write cases.

Run: ``uv run pytest tests/scorers/test_write_route.py -p no:groundeval -q``
"""

from __future__ import annotations

import pytest
from write_corpus import CASES, SNOMED, answer, assert_fails, assert_passes, check

from pytest_groundeval.scorers import routes
from pytest_groundeval.scorers.write import score_write

V3 = "http://terminology.hl7.org/CodeSystem/v3-RouteOfAdministration"
ORAL = {"coding": [{"system": SNOMED, "code": "26643006", "display": "Oral route"}]}
IV = {"coding": [{"system": SNOMED, "code": "47625008", "display": "Intravenous route"}]}
INHALED = {"coding": [{"system": SNOMED, "code": "447694001", "display": "Respiratory tract route"}]}


def _route(case_id, route):
    r = answer(case_id)
    r["dosage"][0]["route"] = route
    return r


def test_documented_routes_of_the_committed_cases():
    docs = {cid: routes.documented_route(c["note"], c["expected"]["display"]) for cid, c in CASES.items()}
    assert docs["aspirin-active-daily"] == ("oral", "the note")  # "oral tablet"
    assert docs["hctz-abbreviation-morning"] == ("oral", "the note")  # "PO"
    assert docs["ibuprofen-two-tablets"] == ("oral", "the product's dose form")  # Oral Tablet
    assert docs["albuterol-puffs-prn-range"] == ("inhalation", "the note")  # "puffs"
    assert docs["fluticasone-mcg-bid"][0] == "inhalation"
    assert docs["aricept-bedtime"][0] is None  # "Donepezil hydrochloride 23 MG [Aricept]": no dose form
    assert {r for r, _ in docs.values()} == {"oral", "inhalation", None}


@pytest.mark.parametrize("case_id,route,why", [
    ("aspirin-active-daily", IV, "dosage[0].route says intravenous, but the note documents the oral route"),
    ("ibuprofen-two-tablets", IV, "but the product's dose form documents the oral route"),
    ("albuterol-puffs-prn-range", ORAL, "route says oral, but the note documents the inhalation route"),
    ("aspirin-active-daily", {"text": "IV push"}, "route says intravenous"),
    # a code and a display that disagree: the resource says both
    ("aspirin-active-daily", {"coding": [{"system": SNOMED, "code": "26643006", "display": "Intravenous route"}]},
     "route says intravenous"),
    ("aspirin-active-daily", {"coding": [{"system": SNOMED, "code": "999999999"}]}, "cannot be read (unverifiable)"),
    ("aspirin-active-daily", {"text": "as directed"}, "cannot be read (unverifiable)"),
])
def test_contradicting_or_unreadable_route_fails_constraints(case_id, route, why):
    assert_fails(_route(case_id, route), case_id, "constraints", "route", why)


@pytest.mark.parametrize("case_id,route", [
    ("aspirin-active-daily", ORAL),
    ("aspirin-active-daily", {"text": "by mouth"}),
    ("aspirin-active-daily", {"text": "PO"}),
    ("aspirin-active-daily", {"coding": [{"system": V3, "code": "PO", "display": "Swallow, oral"}]}),
    ("aspirin-active-daily", {"coding": [{"system": "urn:example:routes", "code": "1", "display": "Oral use"}]}),
    ("ibuprofen-two-tablets", {"coding": [{"system": SNOMED, "code": "26643006"}], "text": "orally"}),
    ("albuterol-puffs-prn-range", INHALED),
    ("albuterol-puffs-prn-range", {"text": "oral inhalation"}),
    ("fluticasone-mcg-bid", {"coding": [{"system": SNOMED, "code": "18679011000001101", "display": "Inhalation"}]}),
    ("aricept-bedtime", IV),  # no route documented: nothing to contradict (the product has no dose form)
])
def test_route_written_any_readable_way_passes(case_id, route):
    assert_passes(_route(case_id, route), case_id)


def test_no_route_written_passes():
    score = score_write(answer("aspirin-active-daily"), CASES["aspirin-active-daily"])
    assert check(score, "constraints", "route").passed
    assert check(score, "constraints", "route").reason == "no route encoded"
