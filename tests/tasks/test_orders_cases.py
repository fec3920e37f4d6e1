"""The committed orders cases: what the generator wrote, the truth the task derives from each
seeded bundle (a few checked by hand against the bundle), the refusals of a case whose choice
the bundle contradicts, the regeneration (byte-identical), and the offline baseline on every
case against the in-process FHIR stand-in."""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path

import pytest

from orders_fake_fhir import BASE, FakeFhir
from pytest_groundeval.model import CaseError
from pytest_groundeval.scorers.orders import score_orders
from pytest_groundeval.tasks.orders import OrdersTask, derive_truth
from pytest_groundeval.tasks.orders_baseline import run_baseline
from pytest_groundeval.tasks.resources import data_path

ROOT = Path(__file__).resolve().parents[2]
CASES = data_path("orders")
TASK = OrdersTask(CASES)
SOURCE = ROOT.parent / "shared" / "data" / "synthea-r4"


def _item(case_id: str) -> tuple[dict, dict]:
    item = json.loads((CASES / f"{case_id}.json").read_text(encoding="utf-8"))
    return item, json.loads((CASES / item["bundle"]).read_text(encoding="utf-8"))


def test_the_suite_holds_every_kind_and_half_nothing_to_do():
    cases = [TASK.load(ref) for ref in TASK.discover()]
    assert len(cases) >= 40
    kinds = Counter((c.truth["kind"], c.truth["due"]) for c in cases)
    assert all(kinds[(k, due)] >= 5 for k in ("hba1c", "bp", "stop") for due in (True, False)), kinds
    nothing = sum(not c.truth["due"] for c in cases)
    assert nothing * 2 >= len(cases), f"{nothing} of {len(cases)} with nothing to do"
    for c in cases:  # the agent's inputs hold no truth; the prompt has the placeholder the harness fills
        assert "{fhir_base_url}" in c.prompt and c.inputs["patient_id"] in c.prompt and c.inputs["today"] in c.prompt
        assert "expected" not in json.dumps(c.inputs) and "choice" not in c.inputs
        entries = c.inputs["bundle"]["entry"]
        assert all(e["request"] == {"method": "PUT", "url": f"{e['resource']['resourceType']}/{e['resource']['id']}"}
                   for e in entries)
        refs = {f"{e['resource']['resourceType']}/{e['resource']['id']}" for e in entries}
        text = json.dumps(c.inputs["bundle"])
        assert "urn:uuid:" not in text.replace('"fullUrl": "urn:uuid:', "")  # references are Type/id
        for e in entries:  # every reference resolves inside the seeded state
            for ref in _references(e["resource"]):
                assert ref in refs, f"{c.case_id}: {ref} dangles"


def _references(node):
    if isinstance(node, dict):
        if isinstance(node.get("reference"), str):
            yield node["reference"]
        for v in node.values():
            yield from _references(v)
    elif isinstance(node, list):
        for v in node:
            yield from _references(v)


# checked by hand against the bundles (the dates, conditions and resources named are in them)
HAND = {
    # Diabetes since 1987-04-01; HbA1c ... 2019-11-06, 2020-11-11; today 2022-03-20: none since 2021-03-20
    "hba1c-due-lapsed-Danae_Kshlerin_87a339d0": (True, {"last_hba1c": "2020-11-11", "window_start": "2021-03-20"}),
    # Diabetes since 1988-09-24, today 1989-02-23: no HbA1c at all yet
    "hba1c-due-never-Almeda_Conn_5f6d256f": (True, {"last_hba1c": None, "diabetic": True}),
    # HbA1c on 2018-01-05, today 2018-05-15: within 12 months
    "hba1c-recent-Emery_Purdy_efe58fa2": (False, {"last_hba1c": "2018-01-05", "recent": True}),
    # prediabetes only (HbA1c 2020-02-06, old): the protocol does not apply
    "hba1c-nondiabetic-Reyna_Ziemann_76d2fa2d": (False, {"diabetic": False, "last_hba1c": "2020-02-06"}),
}


@pytest.mark.parametrize("case_id", sorted(HAND))
def test_hba1c_truth_by_hand(case_id):
    due, facts = HAND[case_id]
    truth = TASK.load(next(r for r in TASK.discover() if r.case_id == case_id)).truth
    assert truth["due"] is due
    assert {k: truth["facts"][k] for k in facts} == facts
    assert (truth["expected"] is not None) is due


def test_stop_and_bp_truth_by_hand():
    truth = TASK.load(next(r for r in TASK.discover() if r.case_id == "stop-Angelic_Mueller_2ec622d5")).truth
    # the note: "Jolivette 28 Day Pack was stopped"; 757594 (Jolivette) is active as af37a47f-...
    assert truth["expected"] == {"resource_type": "MedicationRequest", "id": "MedicationRequest/af37a47f-4469-4795-"
                                 "bfcf-7cf796db3564", "system": "http://www.nlm.nih.gov/research/umls/rxnorm",
                                 "code": "757594", "status": "stopped"}
    truth = TASK.load(next(r for r in TASK.discover() if r.case_id == "bp-repeat-Juliette_Padberg_10fe9427")).truth
    # the note's 138/87 at 13:15 UTC-06:00 is the seeded Observation 1b5d99d7-...
    assert truth["due"] is False and truth["existing"] == ["Observation/1b5d99d7-8afe-5e2d-b9e7-ea29f895de6a"]


def test_a_choice_the_bundle_contradicts_is_refused():
    item, bundle = _item("hba1c-due-lapsed-Danae_Kshlerin_87a339d0")
    with pytest.raises(CaseError, match="not due"):
        derive_truth({**item, "today": "2021-01-01"}, bundle, "x")  # a result 2020-11-11: recent
    item, bundle = _item("bp-Asa_Hermiston_c79b748f")
    with pytest.raises(CaseError, match="the note does not say"):
        derive_truth({**item, "choice": {**item["choice"], "systolic": item["choice"]["systolic"] + 1}}, bundle, "x")
    item, bundle = _item("stop-Angelic_Mueller_2ec622d5")
    two = copy.deepcopy(bundle)
    mr = next(e for e in two["entry"] if e["resource"]["id"].startswith("af37a47f"))
    two["entry"].append({**copy.deepcopy(mr), "resource": {**mr["resource"], "id": "second"}})
    with pytest.raises(CaseError, match="2 active MedicationRequests"):
        derive_truth(item, two, "x")


@pytest.mark.parametrize("over", [{"intent": "proposal"}, {"intent": "plan"}, {"doNotPerform": True},
                                  {"status": "on-hold"}])
def test_an_hba1c_service_request_that_orders_nothing_leaves_the_test_due(over):
    """The seeded order of a repeat case made a proposal, a plan, an order not to test or one on
    hold: no open HbA1c order, so the test is due (the truth), and the baseline orders it."""
    item, bundle = _item("hba1c-repeat-Danae_Kshlerin_87a339d0")
    assert derive_truth(item, bundle, "x")["due"] is False
    changed = copy.deepcopy(bundle)
    sr = next(e["resource"] for e in changed["entry"] if e["resource"]["resourceType"] == "ServiceRequest")
    sr.update(over)
    truth = derive_truth({**item, "choice": {"due": True}}, changed, "x")
    assert truth["due"] is True and truth["facts"]["open_orders"] == []
    fake = FakeFhir(changed)
    run_baseline({**item, "fhir_base_url": BASE}, tools=lambda url: fake.tools())
    assert score_orders(fake.activity(), truth).passed


def test_the_baseline_passes_every_case_on_the_stand_in():
    """The baseline reads the server (not the bundle) with its own rules; the task derives the
    truth from the bundle: two readings of the same data that must agree on every case."""
    failed = []
    for ref in TASK.discover():
        case = TASK.load(ref)
        fake = FakeFhir(case.inputs["bundle"])
        out = run_baseline({**case.inputs, "fhir_base_url": BASE}, tools=lambda url, fake=fake: fake.tools())
        assert out.transcript and all(c["tool"].startswith("fhir_") for c in out.transcript)
        case.inputs["fhir_activity"] = fake.activity()
        score = TASK.score(TASK.parse(out), case)
        if not score.passed:
            failed.append(f"{ref.case_id}: {score.reason}")
        writes = [x for x in fake.log if x.method != "GET"]
        assert len(writes) == (1 if case.truth["due"] else 0), ref.case_id
    assert failed == []


@pytest.mark.skipif(not SOURCE.is_dir(), reason=f"the Synthea sample is not at {SOURCE}")
def test_regenerating_gives_the_committed_files(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_orders_cases", ROOT / "scripts" / "make_orders_cases.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--source", str(SOURCE), "--out", str(tmp_path)]) == 0
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.json"))
    committed = sorted(p.relative_to(CASES) for p in CASES.rglob("*.json"))
    assert made == committed
    assert all((tmp_path / p).read_bytes() == (CASES / p).read_bytes() for p in made)


def test_the_report_view_shows_the_required_code_beside_what_was_written():
    case = TASK.load(next(r for r in TASK.discover() if r.case_id == "hba1c-due-lapsed-Danae_Kshlerin_87a339d0"))
    fake = FakeFhir(case.inputs["bundle"])
    run_baseline({**case.inputs, "fhir_base_url": BASE}, tools=lambda url: fake.tools())
    record_case = {"ground_truth": case.truth, "fhir": fake.activity().model_dump(mode="json")}
    view = OrdersTask.view(record_case)
    assert [(i.code, i.display) for i in view.truth] == [("4548-4", "ServiceRequest active")]
    assert [(i.code, i.display) for i in view.predicted] == [("4548-4", "created ServiceRequest/new-1 active")]
    assert OrdersTask.view({"ground_truth": case.truth}).predicted is None  # no server activity recorded
    assert OrdersTask.view({"ground_truth": "garbage"}) is None
