"""The default-deny walker (scorers/elements.py): each rule fails where it should and passes
its equivalent right case."""

from pytest_groundeval.scorers.elements import ElementSchema, text_elements, unverified, unverified_check

SCHEMA = ElementSchema(
    "ServiceRequest",
    verified=("code.coding.system", "code.coding.code", "status", "subject.reference"),
    inert=("id", "meta", "text.status", "extension.*"),
    text=("code.text", "note.text", "text.div"),
)


def test_accounted_elements_pass():
    res = {"resourceType": "ServiceRequest", "id": "x", "meta": {"versionId": "1", "tag": [{"code": "a"}]},
           "status": "active", "code": {"coding": [{"system": "http://loinc.org", "code": "4548-4"}], "text": "HbA1c"},
           "subject": {"reference": "Patient/1"}, "text": {"status": "generated", "div": "<div>HbA1c</div>"},
           "note": [{"text": "fasting not needed"}]}
    assert unverified(res, SCHEMA) == []
    assert unverified_check(res, SCHEMA).passed


def test_unaccounted_elements_fail_by_path():
    res = {"resourceType": "ServiceRequest", "status": "active",
           "code": {"coding": [{"system": "http://loinc.org", "code": "4548-4", "display": "Lipid panel"}]},
           "specimen": [{"display": "urine"}], "reasonCode": [{"text": "hypertension"}]}
    assert unverified(res, SCHEMA) == ["code.coding[0].display", "specimen[0].display", "reasonCode[0].text"]
    check = unverified_check(res, SCHEMA)
    assert not check.passed and "unverified element: code.coding[0].display" in check.reason


def test_patterns_match_whole_names_not_prefixes():
    assert unverified({"resourceType": "ServiceRequest", "statusReason": {"text": "stopped"}}, SCHEMA) == ["statusReason.text"]
    assert unverified({"resourceType": "ServiceRequest", "extension": [{"url": "u"}]}, SCHEMA) == []
    assert unverified({"resourceType": "ServiceRequest", "extension": "flat"}, SCHEMA) == ["extension"]


def test_empty_containers_are_present_elements():
    assert unverified({"resourceType": "ServiceRequest", "bodySite": []}, SCHEMA) == ["bodySite"]
    assert unverified({"resourceType": "ServiceRequest", "bodySite": {}}, SCHEMA) == ["bodySite"]


def test_longest_pattern_wins_and_text_is_listed():
    schema = ElementSchema("X", verified=(), inert=("text",), text=("text.div",))
    res = {"resourceType": "X", "text": {"status": "generated", "div": "<div>stop it</div>"}}
    assert unverified(res, schema) == []
    assert text_elements(res, schema) == [("text.div", "<div>stop it</div>")]
    assert text_elements(res, SCHEMA) == [("text.div", "<div>stop it</div>")]
