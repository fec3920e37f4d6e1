"""A judged task under LangSmith (issue 20 item 5): the jury's calls are evaluator runs under
each case's root run (one ``llm`` run per judge per item, its verdict and rationale, or why it
gave none), and each scored item's feedback carries every judge's verdict and rationale as its
comment. Unscored items give no feedback (never a fail). The real langsmith client, a fake
LangSmith API and scripted judge servers, all on 127.0.0.1."""

from __future__ import annotations

import shutil

import pytest
from conftest import FIXTURES

pytest.importorskip("langchain_openai")

from judge_server import JudgeServer  # noqa: E402
from test_langsmith_experiments import _children, _env, _feedback_by_run, _roots, fake  # noqa: E402,F401

from pytest_groundeval.store.record import validate_record  # noqa: E402

EVAL_FILE = '''
import pytest

@pytest.mark.letter
def test_letter(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
'''


@pytest.fixture
def judges():
    with JudgeServer() as s:
        yield s


def test_jury_calls_are_evaluator_runs_and_item_feedback_carries_each_judges_words(pytester, fake, judges,
                                                                                     monkeypatch):
    import json

    pytester.makepyfile(test_letter_evals=EVAL_FILE)
    shutil.copytree(FIXTURES / "reconciliation", pytester.path / "cases" / "reconciliation")
    shutil.copytree(FIXTURES / "synthea", pytester.path / "cases" / "synthea")
    server = fake()
    _env(monkeypatch, server.url)
    result = pytester.runpytest_subprocess(
        "--letter-cases", "cases/reconciliation", "-m", "letter", "-k", "Arla_Lang", "--run-record", "record.json",
        "-p", "no:cacheprovider", "--judge-model", "honest", "--judge-model", "honest", "--judge-model", "garbage",
        "--judge-base-url", judges.url)
    assert result.ret == 0, result.stdout.str()[-3000:]
    record = json.loads((pytester.path / "record.json").read_text())
    assert validate_record(record) == []
    runs, feedback = server.decoded()
    roots = _roots(runs)
    by_run = _feedback_by_run(feedback)
    assert len(roots) == len(record["cases"]) >= 1
    assert any(i["verdict"] for c in record["cases"] for i in c["score"]["jury"]["items"])  # some item scored
    for case in record["cases"]:
        root = roots[f"letter:{case['case_id']}"]
        jury = case["score"]["jury"]
        evaluators = [k for k in _children(runs, root) if (k.get("extra") or {}).get("metadata", {}).get("evaluator")]
        assert len(evaluators) == sum(len(i["calls"]) for i in jury["items"]) == 3 * len(jury["items"])
        for item in jury["items"]:
            for call in item["calls"]:
                [run] = [k for k in evaluators if k["name"] == f"judge {call['judge']}: {item['id']}"]
                assert run["run_type"] == "llm" and run["parent_run_id"] == root["id"]
                assert run["outputs"]["verdict"] == call["verdict"]
                if call["verdict"] is None:  # the garbage judge: its failure, not a verdict
                    assert run["error"] and call["judge"].startswith("garbage")
            key = f"item_{item['id']}"
            got = by_run[root["id"]]
            if item["verdict"] is None:
                assert key not in got  # unscored: no feedback, never a fail
                continue
            assert got[key]["score"] == (1 if item["verdict"] == "met" else 0)
            comment = got[key]["comment"]
            assert f"majority: {item['verdict']}" in comment
            for call in item["calls"]:
                assert call["judge"] in comment
                if call["rationale"]:
                    assert call["rationale"][:40] in comment
