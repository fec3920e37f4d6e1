"""Answers the JSON finder cannot read within bounds are parse failures (a scored ``failed``),
never a crash (an ``internal`` error, out of the scores) and never a scan that takes minutes:
a megabyte of "{" before the answer, JSON nested past the recursion limit, an integer of more
digits than Python converts. Each used to raise out of the parser (or, the braces, take a
scan per "{" up to its position: quadratic). Ordinary prose with braces still reads."""

from __future__ import annotations

import json

import pytest

from pytest_groundeval.agents.langgraph_agent import _contains_json_object
from pytest_groundeval.model import ParseError
from pytest_groundeval.tasks.extraction import parse_answer as parse_extraction
from pytest_groundeval.tasks.jsontext import MAX_FAILED_STARTS, UnreadableJson, json_objects
from pytest_groundeval.tasks.reconciliation import parse_answer as parse_reconciliation

ANSWER = '{"active_medications": [{"code": "197361", "display": "Amlodipine 5 MG Oral Tablet"}]}'

UNREADABLE = {
    "a megabyte of braces first": ("{" * 1_000_000 + ANSWER, "start no JSON object"),
    "braces amid the prose": ("x { " * (MAX_FAILED_STARTS + 1) + ANSWER, "start no JSON object"),
    "nested past the recursion limit": ('{"a":' * 100_000 + ANSWER, "nested too deeply"),
    "an answer nested too deeply": ('{"active_medications": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    "an integer past the digit limit": ('{"x": ' + "9" * 5000 + "} " + ANSWER, "cannot be read"),
}


@pytest.mark.parametrize("text, why", UNREADABLE.values(), ids=list(UNREADABLE))
def test_unreadable_answers_are_parse_failures(text, why):
    for parse in (parse_extraction, parse_reconciliation):
        with pytest.raises(ParseError, match=why):
            parse(text)
    with pytest.raises(UnreadableJson):
        json_objects(text)
    assert _contains_json_object(text) is False  # the langgraph agent's answer rule: nothing to take


def test_prose_with_braces_and_one_answer_still_reads():
    prose = "Here is {my} answer, as {requested}: " * (MAX_FAILED_STARTS // 2 - 1)
    for text in (ANSWER, prose + ANSWER, f"```json\n{ANSWER}\n```", prose + f"```json\n{ANSWER}\n```"):
        assert parse_extraction(text)[0]["code"] == "197361"
    deep_but_fine = {"active_medications": [], "note": json.loads("[" * 500 + "]" * 500)}
    assert json_objects(json.dumps(deep_but_fine)) == [deep_but_fine]
    with pytest.raises(ParseError, match="2 JSON objects"):
        parse_extraction(ANSWER + " " + ANSWER)


# ---------------------------------------------------------------- an object that does not parse (issue 31)
MISSING_COMMA = ('Here is the answer:\n```json\n{\n  "active_medications": [\n    {"code": "197361"\n'
                 '     "display": "Amlodipine 5 MG Oral Tablet"}\n  ]\n}\n```')
BROKEN = {
    "a fenced object missing a comma": (MISSING_COMMA, "Expecting ',' delimiter at line 4 column 6"),
    "an object cut off mid-string (a model at its token cap)": (
        'Sure. {"active_medications": [{"code": "1973', "Unterminated string starting at line 1 column 34"),
    "a broken object after prose braces": ("I used {tools} to read it: " + ANSWER[:-2] + "}",
                                           "Expecting ',' delimiter at line 1 column 85"),
    "an answer nested in an object that does not parse": (
        '{"answer": ' + ANSWER + ' "note": "from the record"}', "Expecting ',' delimiter at line 1 column 99"),
}


@pytest.mark.parametrize("text, why", BROKEN.values(), ids=list(BROKEN))
def test_an_object_that_does_not_parse_says_where(text, why):
    """Still a parse failure (default deny), saying what the parser says and where in the object."""
    for parse in (parse_extraction, parse_reconciliation):
        with pytest.raises(ParseError, match="^a JSON object that does not parse: " + why + "$"):
            parse(text)


def test_text_without_an_object_still_says_none_found():
    for text in ("no json here", "I used {tools} and {more}.", '["a list", "not an object"]'):
        with pytest.raises(ParseError, match="^no JSON object found in the output$"):
            parse_extraction(text)


@pytest.mark.parametrize("text", ["", "  \n\t"])
def test_an_empty_output_says_it_is_empty(text):
    """The first real-model run: a final turn that was a tool call cut at the cap, no text."""
    for parse in (parse_extraction, parse_reconciliation):
        with pytest.raises(ParseError, match="^the output is empty: no JSON object to read$"):
            parse(text)


def test_the_same_answers_written_right_parse():
    fixed = MISSING_COMMA.replace('"197361"\n', '"197361",\n')
    assert parse_extraction(fixed) == [{"code": "197361", "display": "Amlodipine 5 MG Oral Tablet"}]
    # an answer after prose that holds a broken object of its own (not around the answer) still reads
    assert parse_extraction('I first wrote {"active_medications": [} by mistake; here it is: ' + ANSWER)


# ---------------------------------------------------------------- one answer and its prose (issue 28)
from pytest_groundeval.tasks.jsontext import one_answer, unknown_keys, unstated_claims  # noqa: E402

OBJ = {"value": 6.14, "unit": "mL/min/{1.73_m2}", "effective": "2019-03-02", "flag": True,
       "items": [{"code": "197361", "display": "Amlodipine 5 MG Oral Tablet"}]}


def _said(prose, **vocabulary):
    return [(c.kind, c.text) for c in unstated_claims(prose, OBJ, **vocabulary)]


def test_one_answer_gives_the_object_and_the_prose_without_its_fence():
    found = one_answer('Here it is:\n```json\n{"a": 1}\n```\nDone.')
    assert found.obj == {"a": 1} and "```" not in found.prose and "Here it is:" in found.prose and "Done." in found.prose
    with pytest.raises(ParseError, match="2 JSON objects"):
        one_answer('{"a": 1} or {"a": 2}')


@pytest.mark.parametrize("prose", [
    "The latest is 6.14 (6.1, rounded) on 2019-03-02, i.e. March 2, 2019 / 2 Mar 2019 / 03/02/2019.",
    "Unit mL/min/{1.73_m2}; 1 item: Amlodipine 5 mg (RxNorm 197361); flag true. Yes.",
    "1. Read Patient/abc-123 and Observation/9f8e.\n2. The effective time was 2019-03-02T10:30:00+01:00.",
    "Nothing else to add.",
], ids=["its own values and dates in other forms", "its unit, count, display and code, its flag",
        "list markers, references, a dateTime", "no numbers"])
def test_prose_repeating_the_objects_own_values_states_nothing_more(prose):
    assert _said(prose, flag_key="flag") == []


@pytest.mark.parametrize("prose,said", [
    ("or 7.4", [("number", "7.4")]),
    ("about 6", [("number", "6")]),  # 6.14 is not 6 to a reader: an integer must be the value
    ("also 2019-03-09", [("date", "2019-03-09")]),
    ("or 9 March 2019", [("date", "9 March 2019")]),
    ("see 4548-4", [("code", "4548-4")]),
    ("flag: false", [("flag", "false")]),
    ("No, it is not.", [("flag", "No")]),
    ("2 items", [("number", "2")]),
])
def test_what_the_object_does_not_state_is_a_claim(prose, said):
    assert _said(prose, flag_key="flag") == said


def test_the_callers_vocabulary_may_be_named():
    assert _said("LOINC 4548-4, threshold 6.5", codes=["4548-4"], numbers=[6.5]) == []
    assert _said("No, it is not.") == []  # a yes/no answer word is read only against the caller's flag


def test_an_unknown_key_is_named_with_its_path():
    unknown_keys({"code": "1", "display": "x"}, ("code", "display", "system"))
    with pytest.raises(ParseError, match=r"unknown key: items\[0\]\.status"):
        unknown_keys({"code": "1", "status": "stopped"}, ("code", "display"), "items[0].")
