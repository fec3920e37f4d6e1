"""The reconciliation suite end to end through pytest (pytester): the committed cases and
their bundles in a project, run with the offline baseline and with a scripted agent that
calls every active medication "matched"; the run record holds each case's outcome and score."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import FIXTURES

from pytest_groundeval.store.record import validate_record

CASES = sorted(p.stem for p in (FIXTURES / "reconciliation").glob("*.json"))

EVAL_FILE = '''
import pytest

@pytest.mark.reconciliation
def test_reconciliation(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
'''

AGENTS = '''
import json

class AllMatched:
    """Reads the bundle out of the prompt and calls every active medication matched."""
    name = "all-matched"
    def run(self, prompt):
        bundle = json.JSONDecoder().raw_decode(prompt.split("Bundle:\\n", 1)[1])[0]
        meds = {}
        for e in bundle["entry"]:
            r = e["resource"]
            if r["resourceType"] == "MedicationRequest" and r["status"] == "active" and "medicationCodeableConcept" in r:
                c = r["medicationCodeableConcept"]["coding"][0]
                meds[c["code"]] = {"code": c["code"], "display": c["display"], "verdict": "matched"}
        return json.dumps({"medications": list(meds.values())})
'''


@pytest.fixture
def recproject(pytester: pytest.Pytester):
    yield from _project(pytester)


def _project(pytester: pytest.Pytester):
    pytester.makepyfile(test_rec_evals=EVAL_FILE, agents_under_test=AGENTS)
    shutil.copytree(FIXTURES / "reconciliation", pytester.path / "cases" / "reconciliation")
    shutil.copytree(FIXTURES / "synthea", pytester.path / "cases" / "synthea")
    yield pytester


def _run(p, *args):
    return p.runpytest("--reconciliation-cases", "cases/reconciliation", "-m", "reconciliation",
                       "--run-record", "record.json", "-p", "no:cacheprovider", *args)


def _no_discrepancy(case_id: str) -> bool:
    data = json.loads((FIXTURES / "reconciliation" / f"{case_id}.json").read_text())
    return not data["omitted_active"] and all(r["source"] == "active" for r in data["reported"])


def test_all_matched_agent_fails_every_case_with_a_discrepancy(recproject):
    result = _run(recproject, "--agent=agents_under_test:AllMatched")
    clean = [c for c in CASES if _no_discrepancy(c)]
    result.assert_outcomes(passed=len(clean), failed=len(CASES) - len(clean))
    rec = json.loads((recproject.path / "record.json").read_text())
    assert validate_record(rec) == []
    by_id = {c["case_id"]: c for c in rec["cases"]}
    assert sorted(by_id) == CASES
    for cid, c in by_id.items():
        assert c["outcome"] == ("passed" if cid in clean else "failed"), cid
        assert c["score"]["metrics"]["exact_match"] == (1.0 if cid in clean else 0.0)
        assert c["content_hash"].startswith("sha256:")
    s = rec["summary"]["reconciliation"]
    assert s["n_cases"] == len(CASES) and s["exact_match"] == pytest.approx(len(clean) / len(CASES), abs=1e-6)
    assert s["unrecorded_recall"] == 0.0 and s["stopped_but_taking_recall"] == 0.0


def test_baseline_agent_figures_through_pytest(recproject):
    result = _run(recproject)
    result.assert_outcomes(passed=39, failed=len(CASES) - 39)
    s = json.loads((recproject.path / "record.json").read_text())["summary"]["reconciliation"]
    assert s["micro_f1"] == pytest.approx(0.957806)
    assert s["exact_match"] == pytest.approx(39 / 47, abs=1e-6)
    assert s["exact_match_ci95"] == [0.698602, 0.911136]  # Wilson, 39 of 47 exact
