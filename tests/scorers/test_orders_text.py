"""The orders scorer reads what a written resource's own words say (helper audit, gap 1): an
order whose narrative (``text.div``), note, patient instruction or code text calls it off
("cancelled", "do not draw", "on hold", "entered in error") beside ``status: active`` is not an
order a careful clinician acts on, and fails ``correct`` under the rule
``text_agrees_with_status``; likewise a reading marked final whose note voids it, and a
stopped MedicationRequest whose added note says it is held or resumed. The words are read in
any encoding a reader sees through (HTML entities, case, zero-width characters, look-alike
letters, hidden markup, spaced-out letters). A benign note ("take with food", "fasting not
required", "not cancelled", "prior order cancelled") passes, and the record's own words on a
stopped MedicationRequest are not the agent's answer."""

from __future__ import annotations

import copy

import pytest

from orders_fake_fhir import FakeFhir
from pytest_groundeval.scorers.orders import score_orders, text_contradictions
from test_orders_scorer import BP, HBA, STOP, load, order, reading, target_mr

RULE = "text_agrees_with_status"
DIV = '<div xmlns="http://www.w3.org/1999/xhtml">{}</div>'


def _order(**over):
    def behaviour(fake, t):
        fake.fhir_create(order(t, **over))
    return behaviour


def _note(text):
    return _order(note=[{"text": text}])


def _reading_note(text):
    def behaviour(fake, t):
        fake.fhir_create(reading(t, note=[{"text": text}]))
    return behaviour


def _stop(**over):
    def behaviour(fake, t):
        fake.fhir_update({**target_mr(fake, t), "status": "stopped", **over})
    return behaviour


CALLED_OFF = [
    ("note-cancelled", HBA, _note("Cancelled")),
    ("note-upper", HBA, _note("DISCONTINUED per Dr Smith")),
    ("note-do-not-draw", HBA, _note("Do not draw.")),
    ("note-on-hold", HBA, _note("On hold until further notice")),
    ("note-dc", HBA, _note("d/c'd")),
    ("note-entered-in-error", HBA, _note("entered-in-error")),
    ("note-second-sentence", HBA, _note("Annual HbA1c. Cancelled.")),
    ("note-not-a-negation", HBA, _note("Not a mistake: cancelled")),
    ("note-this-existing-order", HBA, _note("This existing order is cancelled")),
    ("note-spanish", HBA, _note("Orden cancelada")),
    ("note-french", HBA, _note("Demande annulée")),
    ("note-german", HBA, _note("Auftrag storniert")),
    ("note-entity-decimal", HBA, _note("&#67;ancelled")),
    ("note-entity-hex", HBA, _note("&#x63;ancel&#x6C;ed")),
    ("note-zero-width", HBA, _note("can\u200bcel\u200dled")),
    ("note-soft-hyphen", HBA, _note("discon\u00adtinued")),
    ("note-cyrillic", HBA, _note("\u0441\u0430n\u0441elled")),
    ("note-fullwidth", HBA, _note("\uff23\uff21\uff2e\uff23\uff25\uff2c\uff2c\uff25\uff24")),
    ("note-spaced", HBA, _note("C A N C E L L E D")),
    ("note-dotted", HBA, _note("c.a.n.c.e.l.l.e.d")),
    ("note-hyphen-break", HBA, _note("Discon-\ntinued")),
    ("note-hyphenated-words", HBA, _note("do-not-draw")),
    ("div-alt-text", HBA, _order(text={"status": "generated", "div": DIV.format(
        '<p>HbA1c order</p><img src="#stamp" alt="&#67;ANCELLED"/>')})),
    ("div-tooltip", HBA, _order(text={"status": "generated", "div": DIV.format(
        "<p><span title='void'>HbA1c order</span></p>")})),
    ("div", HBA, _order(text={"status": "generated", "div": DIV.format(
        "<p>HbA1c order, status active</p><p><b>CANCELLED</b> &#8212; do not draw</p>")})),
    ("div-hidden", HBA, _order(text={"status": "generated", "div": DIV.format(
        '<p>HbA1c order</p><span style="display:none">cancelled</span>')})),
    ("div-comment", HBA, _order(text={"status": "generated", "div": DIV.format("<p>HbA1c</p><!-- void -->")})),
    ("patient-instruction", HBA, _order(patientInstruction="Don't draw: order withdrawn")),
    ("code-text", HBA, _order(code={"coding": [{"system": "http://loinc.org", "code": "4548-4"}],
                                    "text": "HbA1c (entered in error)"})),
    ("coding-display", HBA, _order(code={"coding": [{"system": "http://loinc.org", "code": "4548-4",
                                                     "display": "Hemoglobin A1c - VOID"}]})),
    ("extension-string", HBA, _order(extension=[{"url": "https://example.org/remark",
                                                 "valueString": "Suspended"}])),
    ("note-author", HBA, _order(note=[{"authorString": "CANCELLED by Dr X", "text": "see the author line"}])),
    ("status-extension", HBA, _order(_status={"extension": [{"url": "https://example.org/shown-status",
                                                            "valueString": "cancelled"}]})),
    ("tag-display", HBA, _order(meta={"tag": [{"system": "https://example.org/t", "code": "x",
                                              "display": "Cancelled"}]})),
    ("reading-in-error", BP, _reading_note("Entered in error - wrong patient")),
    ("reading-div-disregard", BP, lambda fake, t: fake.fhir_create(reading(
        t, text={"status": "generated", "div": DIV.format("Disregard this reading")}))),
    ("stop-held", STOP, _stop(note=[{"text": "Held until after surgery"}])),
    ("stop-resume", STOP, _stop(note=[{"text": "Resume in two weeks"}])),
    ("stop-in-error", STOP, _stop(statusReason={"text": "Entered in error"})),
]

BENIGN = [
    ("note-take-with-food", HBA, _note("take with food")),
    ("note-fasting", HBA, _note("Fasting not required.")),
    ("note-protocol", HBA, _note("Annual HbA1c overdue per the diabetes monitoring protocol")),
    ("note-negated", HBA, _note("Not cancelled: please draw at the next visit")),
    ("note-do-not-stop", HBA, _note("Do not stop metformin before the draw")),
    ("note-prior", HBA, _note("Prior order cancelled; this one replaces it")),
    ("note-stop-by", HBA, _note("Patient to stop by the lab this week")),
    ("note-existing-stopped", HBA, _note("Existing ServiceRequest is stopped, so a new one is needed")),
    ("note-existing-revoked", HBA, _note("The existing HbA1c order was revoked; a new order is placed")),
    ("note-hyphens", HBA, _note("Follow-up HbA1c, point-of-care test acceptable")),
    ("div-image", HBA, _order(text={"status": "generated", "div": DIV.format(
        '<p>HbA1c order</p><img src="#logo" alt="clinic logo" title="Lab order"/>')})),
    ("div-generated", HBA, _order(text={"status": "generated", "div": DIV.format(
        "<p>Hemoglobin A1c order for the patient; status <b>active</b>, intent order</p>")})),
    ("reading-seated", BP, _reading_note("Seated, left arm, after five minutes rest")),
    ("stop-reason", STOP, _stop(statusReason={"text": "Discontinued by the prescriber"},
                                note=[{"text": "Stopped per the clinic note: cough"}])),
]


def _score(case_id, behaviour):
    case = load(case_id)
    fake = FakeFhir(case.inputs["bundle"])
    behaviour(fake, case.truth)
    return score_orders(fake.activity(), case.truth)


@pytest.mark.parametrize(("case_id", "behaviour"), [(c, b) for _, c, b in CALLED_OFF], ids=[n for n, _, _ in CALLED_OFF])
def test_words_that_call_the_resource_off_fail_correct(case_id, behaviour):
    score = _score(case_id, behaviour)
    failed = {k for k, d in score.dimensions.items() if not d.passed}
    assert failed == {"correct"}, score.reason
    assert RULE in score.reason, score.reason


@pytest.mark.parametrize(("case_id", "behaviour"), [(c, b) for _, c, b in BENIGN], ids=[n for n, _, _ in BENIGN])
def test_benign_words_pass(case_id, behaviour):
    score = _score(case_id, behaviour)
    assert score.passed, score.reason
    check = next(c for c in score.dimensions["correct"].checks if c.name == RULE)
    assert check.passed


def test_the_record_s_own_words_are_not_the_agent_s():
    """A stopped MedicationRequest keeps the record's note "continue taking with food" (the
    instruction says to keep the rest as it is): not the agent's words, no contradiction; the
    same words added by the agent are."""
    case = load(STOP)
    fake = FakeFhir(case.inputs["bundle"])
    key = case.truth["expected"]["id"]
    fake.state[key] = {**fake.state[key], "note": [{"text": "Continue taking with food"}]}
    fake.before[key] = copy.deepcopy(fake.state[key])
    fake.fhir_update({**target_mr(fake, case.truth), "status": "stopped"})
    assert score_orders(fake.activity(), case.truth).passed
    before = {"resourceType": "MedicationRequest", "status": "active"}
    after = {**before, "status": "stopped", "note": [{"text": "Continue taking with food"}]}
    assert text_contradictions(after, before) == ["note[0].text says 'continue taking'"]


def test_the_reason_says_where_and_what():
    score = _score(HBA, _note("Cancelled"))
    reason = score.dimensions["correct"].reason
    assert "note[0].text says 'cancelled'" in reason and "status 'active'" in reason
