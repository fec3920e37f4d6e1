"""What each kept result holds (the reporter keeps every case's typed result to the end of the
run): a None given for a field whose default is None is not in its set of given fields (the
record's bytes are the same), and the extraction truth and answer share their code and
display strings across cases."""

from __future__ import annotations

import orjson
from conftest import SYNTHEA

from pytest_groundeval.model import CaseRef
from pytest_groundeval.run.runner import _result
from pytest_groundeval.tasks.extraction import active_medications, parse_answer


def test_a_none_given_for_a_none_default_is_not_kept_as_given_and_dumps_the_same():
    ref = CaseRef(task="extraction", case_id="c1", path=SYNTHEA)
    fields = {"outcome": "error", "error": {"kind": "agent", "message": "boom"}, "usage": None, "cost_usd": None,
              "model": None, "transcript": None, "content_hash": "sha256:x"}
    result = _result(ref, fields, 0.5)
    assert not ({"usage", "cost_usd", "model", "transcript"} & result.model_fields_set)
    assert {"outcome", "error", "content_hash"} <= result.model_fields_set
    from pytest_groundeval.model import CaseResult

    full = CaseResult(case_id="c1", task="extraction", repeat=None, duration_s=0.5, **fields)
    assert orjson.dumps(result.model_dump(mode="json")) == orjson.dumps(full.model_dump(mode="json"))


def test_truth_and_answers_of_different_cases_share_their_strings():
    path = next(p for p in sorted(SYNTHEA.glob("*.json")) if active_medications(orjson.loads(p.read_bytes()), p.name))
    a = active_medications(orjson.loads(path.read_bytes()), "a")
    b = active_medications(orjson.loads(path.read_bytes()), "b")  # parsed again: new strings, then shared
    assert a == b and all(x["code"] is y["code"] and x["display"] is y["display"] for x, y in zip(a, b))
    text = orjson.dumps({"active_medications": a}).decode()
    got = parse_answer(text)
    assert all(g["code"] is t["code"] and g["display"] is t["display"] for g, t in zip(got, a))
