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
