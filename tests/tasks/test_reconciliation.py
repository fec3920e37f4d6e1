"""Medication reconciliation: the committed cases, the generator, parsing, the scorer's
rules (each with a failing and a passing answer), the baseline's figures, the agent inputs
and the per-case bundle tools. All offline."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT

from pytest_groundeval.fhir.medications import distinct_codes, medication_requests
from pytest_groundeval.model import AgentOutput, CaseError, CaseResult, ParseError
from pytest_groundeval.scorers import reconciliation as scorer
from pytest_groundeval.tasks.reconciliation import (ReconciliationTask, catalog_candidates, parse_answer,
                                                    render_candidates, site_catalog)

CASES = FIXTURES / "reconciliation"
VERDICTS = scorer.VERDICTS


def _generator():
    spec = importlib.util.spec_from_file_location("make_reconciliation_cases", ROOT / "scripts" / "make_reconciliation_cases.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def task() -> ReconciliationTask:
    return ReconciliationTask(CASES)


@pytest.fixture(scope="module")
def cases(task):
    return {ref.case_id: task.load(ref) for ref in task.discover()}


def answer(items) -> AgentOutput:
    return AgentOutput(text=json.dumps({"medications": items}))


def truth_answer(case) -> list[dict]:
    return [{"code": t["code"], "display": t["display"], "verdict": t["verdict"]} for t in case.truth]


def score(task, case, items):
    return task.score(task.parse(answer(items)), case)


def with_verdicts(cases, *verdicts):
    """The first case (by id) whose truth has every one of ``verdicts``."""
    for cid in sorted(cases):
        if set(verdicts) <= {t["verdict"] for t in cases[cid].truth}:
            return cases[cid]
    raise AssertionError(f"no committed case has all of {verdicts}")


# ------------------------------------------------------------------ the committed cases
def test_generator_is_deterministic_and_reproduces_the_committed_cases(tmp_path, capsys):
    gen = _generator()
    args = ["--fixtures", str(FIXTURES / "synthea"), "--catalog", str(FIXTURES / "terminology" / "rxnorm.json"),
            "--seed", "7", "--bundle-ref", "../synthea"]
    assert gen.main(args + ["--out", str(tmp_path / "a")]) == 0
    table = capsys.readouterr().out
    assert gen.main(args + ["--out", str(tmp_path / "b")]) == 0
    committed = sorted(p.name for p in CASES.glob("*.json"))
    for out in ("a", "b"):
        made = sorted(p.name for p in (tmp_path / out).glob("*.json"))
        assert made == committed
        for name in committed:
            assert (tmp_path / out / name).read_bytes() == (CASES / name).read_bytes(), name
    assert "unreported + unrecorded + stopped" in table and "none" in table
    # another seed gives other notes (the seed is really used)
    assert gen.main(args + ["--out", str(tmp_path / "c"), "--seed", "8"]) == 0
    assert any((tmp_path / "c" / n).exists() and (tmp_path / "c" / n).read_bytes() != (CASES / n).read_bytes()
               for n in committed)


def test_committed_cases_are_at_least_40_and_stratified(cases):
    assert len(cases) >= 40
    strata = Counter()
    for case in cases.values():
        verdicts = {t["verdict"] for t in case.truth}
        strata[tuple(v for v in VERDICTS[1:] if v in verdicts)] += 1
        assert "matched" in verdicts
    assert strata[()] >= 4  # no discrepancy at all
    for v in VERDICTS[1:]:
        assert strata[(v,)] >= 4, strata  # each kind alone
    assert strata[tuple(VERDICTS[1:])] >= 4  # all three together
    several = Counter(v for c in cases.values() for v, n in Counter(t["verdict"] for t in c.truth).items()
                      if n >= 2 and v != "matched")
    assert all(several[v] >= 2 for v in VERDICTS[1:]), several


def test_every_case_truth_follows_from_its_bundle_and_choices(task, cases):
    catalog = {e["code"] for e in json.loads((FIXTURES / "terminology" / "rxnorm.json").read_text())}
    for cid, case in cases.items():
        data = json.loads(case.ref.path.read_text())
        bundle = json.loads((case.ref.path.parent / data["bundle"]).read_text())
        active = set(distinct_codes(medication_requests(bundle, cid, ("active",))))
        ended = set(distinct_codes(medication_requests(bundle, cid, ("stopped", "completed")))) - active
        anywhere = set(distinct_codes(medication_requests(bundle, cid, (
            "active", "stopped", "completed", "on-hold", "cancelled", "draft", "entered-in-error", "unknown"))))
        reported = {r["code"] for r in data["reported"]}
        by_v = {v: {t["code"] for t in case.truth if t["verdict"] == v} for v in VERDICTS}
        assert by_v["matched"] == active & reported, cid
        assert by_v["unreported"] == active - reported == set(data["omitted_active"]), cid
        assert by_v["stopped-but-taking"] == reported & ended, cid
        assert by_v["unrecorded"] == reported - anywhere, cid
        assert by_v["unrecorded"] <= catalog
        assert sum(len(s) for s in by_v.values()) == len(case.truth)  # each code once
        for r in data["reported"]:  # the note really says each reported medication
            assert r["wording"] in data["patient_report"]
        assert case.content_hash.startswith("sha256:") and len(case.content_hash) == 71


def test_content_hash_covers_the_case_file_and_the_bundle(tmp_path, task, cases):
    case = next(iter(cases.values()))
    data = json.loads(case.ref.path.read_text())
    (tmp_path / "cases").mkdir()
    bundle = tmp_path / "b.json"
    shutil.copy(case.ref.path.parent / data["bundle"], bundle)
    data["bundle"] = "../b.json"
    (tmp_path / "cases" / f"{case.case_id}.json").write_text(json.dumps(data))
    t = ReconciliationTask(tmp_path / "cases")
    h1 = t.load(t.discover()[0]).content_hash
    bundle.write_text(bundle.read_text() + "\n")  # same content, other bytes
    h2 = t.load(t.discover()[0]).content_hash
    data["patient_report"] += " "
    (tmp_path / "cases" / f"{case.case_id}.json").write_text(json.dumps(data))
    h3 = t.load(t.discover()[0]).content_hash
    assert len({h1, h2, h3}) == 3


# ------------------------------------------------------------------ unusable cases
def _broken(tmp_path, case, edit) -> Path:
    data = json.loads(case.ref.path.read_text())
    data["bundle"] = str((case.ref.path.parent / data["bundle"]).resolve())
    edit(data)
    folder = tmp_path / "cases"
    folder.mkdir(exist_ok=True)
    path = folder / f"{case.case_id}.json"
    path.write_text(json.dumps(data) if isinstance(data, dict) else data)
    return path


def _edit_reported(source, code_of):
    def edit(d):
        r = next(r for r in d["reported"] if r["source"] == source)
        r["code"] = code_of(d)
    return edit


@pytest.mark.parametrize("what, edit, message", [
    ("catalog code the record has", "catalog->active", "makes it 'matched', not 'unrecorded'"),
    ("stopped code that is active", "stopped->active", "makes it 'matched', not 'stopped-but-taking'"),
    ("active code that is not in the record", "active->catalog", "makes it 'unrecorded', not 'matched'"),
    ("omitted list wrong", "omitted", "omitted_active"),
    ("wording not in the note", "wording", "does not occur in the patient_report"),
    ("missing bundle", "bundle", "bundle"),
    ("case id not the file name", "case_id", "does not match the file name"),
    ("missing key", "key", "lacks ['reported']"),
    ("code reported twice", "twice", "reported twice"),
    ("unknown source", "source", "is not one of"),
])
def test_inconsistent_or_broken_case_is_a_case_error_naming_the_file(tmp_path, cases, what, edit, message):
    case = with_verdicts(cases, "unreported", "unrecorded", "stopped-but-taking")
    omitted = next(t["code"] for t in case.truth if t["verdict"] == "unreported")  # active, not reported
    stopped_code = next(t["code"] for t in case.truth if t["verdict"] == "stopped-but-taking")
    edits = {
        "catalog->active": _edit_reported("catalog", lambda d: omitted),
        "stopped->active": _edit_reported("stopped", lambda d: omitted),
        "active->catalog": _edit_reported("active", lambda d: "866924"),  # metoprolol tartrate: not in any record
        "omitted": lambda d: d.__setitem__("omitted_active", d["omitted_active"] + [stopped_code]),
        "wording": lambda d: d["reported"][0].__setitem__("wording", "unobtainium 5 mg"),
        "bundle": lambda d: d.__setitem__("bundle", "../nowhere/missing.json"),
        "case_id": lambda d: d.__setitem__("case_id", "someone-else"),
        "key": lambda d: d.pop("reported"),
        "twice": lambda d: d["reported"].append(dict(d["reported"][0])),
        "source": lambda d: d["reported"][0].__setitem__("source", "hearsay"),
    }
    path = _broken(tmp_path, case, edits[edit])
    t = ReconciliationTask(path.parent)
    with pytest.raises(CaseError) as e:
        t.load(t.discover()[0])
    assert path.name in str(e.value) and message in str(e.value), (what, str(e.value))


def test_the_committed_case_itself_loads(tmp_path, cases):
    """The _broken() copy with no edit loads: the errors above come from the edits."""
    case = with_verdicts(cases, "unreported", "unrecorded", "stopped-but-taking")
    path = _broken(tmp_path, case, lambda d: None)
    t = ReconciliationTask(path.parent)
    assert t.load(t.discover()[0]).truth == case.truth


def test_reported_code_recorded_only_in_another_status_is_a_case_error(tmp_path, cases):
    case = with_verdicts(cases, "matched", "stopped-but-taking")
    data = json.loads(case.ref.path.read_text())
    bundle = json.loads((case.ref.path.parent / data["bundle"]).read_text())
    code = next(t["code"] for t in case.truth if t["verdict"] == "stopped-but-taking")
    for e in bundle["entry"]:
        r = e["resource"]
        if r["resourceType"] == "MedicationRequest" and code in json.dumps(r.get("medicationCodeableConcept", {})):
            r["status"] = "on-hold"
    (tmp_path / "b.json").write_text(json.dumps(bundle))
    path = _broken(tmp_path, case, lambda d: d.__setitem__("bundle", str(tmp_path / "b.json")))
    t = ReconciliationTask(path.parent)
    with pytest.raises(CaseError, match=r"only as \['on-hold'\]; no verdict is defined"):
        t.load(t.discover()[0])


def test_discover_lists_names_only_and_a_missing_folder_is_refused(tmp_path):
    (tmp_path / "x.json").write_text("not json at all")
    (tmp_path / "notes.txt").write_text("ignored")
    t = ReconciliationTask(tmp_path)
    refs = t.discover()  # does not read the file
    assert [r.case_id for r in refs] == ["x"]
    with pytest.raises(CaseError, match="x.json: not valid JSON"):
        t.load(refs[0])
    with pytest.raises(FileNotFoundError, match="reconciliation cases not found"):
        ReconciliationTask(tmp_path / "nope").discover()


# ------------------------------------------------------------------ what the agent sees
def test_agent_inputs_and_prompt_hold_no_truth_or_choices(cases):
    for case in cases.values():
        data = json.loads(case.ref.path.read_text())
        assert set(case.inputs) == {"bundle_json", "patient_report"}
        assert case.inputs["patient_report"] == data["patient_report"]
        blob = case.prompt + json.dumps(case.inputs)
        for secret in ('"source"', "omitted_active", '"wording"', '"additions"', "stopped-but-taking\"}"):
            assert secret not in blob
        # the catalog section is the site catalog's entries sharing a word with the note:
        # a function of the note alone, never of the truth or the recorded choices
        head, rest = case.prompt.split("\n\nSite RxNorm catalog", 1)
        section, bundle = rest, case.inputs["bundle_json"]  # the bundle opens the prompt (in head)
        listed = catalog_candidates(data["patient_report"], site_catalog())
        assert section.split(":\n", 1)[1] == render_candidates(listed)
        for t in case.truth:
            if t["verdict"] == "unrecorded":  # a catalog code: listed with the others, nowhere else
                assert t["code"] in {c for c, _ in listed}
                assert t["code"] not in head + bundle + json.dumps(case.inputs)
        for v in VERDICTS:  # the prompt defines every verdict
            assert f'"{v}"' in case.prompt


# ------------------------------------------------------------------ parsing
@pytest.mark.parametrize("text, message", [
    ('{"meds": []}', "no 'medications' key"),
    ('{"medications": {}}', "is dict, expected a list"),
    ('{"medications": ["123"]}', "medications[0] is str, expected an object"),
    ('{"medications": [{"verdict": "matched"}]}', "medications[0].code is None"),
    ('{"medications": [{"code": "  ", "verdict": "matched"}]}', "medications[0].code is '  '"),
    ('{"medications": [{"code": 123.0, "verdict": "matched"}]}', "medications[0].code is 123.0"),
    ('{"medications": [{"code": true, "verdict": "matched"}]}', "medications[0].code is True"),
    ('{"medications": [{"code": "1", "verdict": "stopped"}]}', "verdict is 'stopped', expected one of"),
    ('{"medications": [{"code": "1"}]}', "verdict is None"),
    ('{"medications": [{"code": "1", "verdict": "matched", "display": 5}]}', "display is int"),
    ('no json here', "no JSON object found"),
    ('{"medications": []} {"medications": []}', "found 2 JSON objects"),
])
def test_parse_errors_are_clear(text, message):
    with pytest.raises(ParseError, match=message.replace("[", r"\[").replace("(", r"\(")):
        parse_answer(text)


def test_parse_normalises_code_and_verdict_forms():
    got = parse_answer('Sure:\n```json\n{"medications": [{"code": " 314076 ", "verdict": "Matched"}, '
                       '{"code": 197361, "verdict": "stopped_but_taking"}, '
                       '{"code": "1", "verdict": "Stopped But Taking", "display": "x"}]}\n```')
    assert got == [{"code": "314076", "display": None, "verdict": "matched"},
                   {"code": "197361", "display": None, "verdict": "stopped-but-taking"},
                   {"code": "1", "display": "x", "verdict": "stopped-but-taking"}]
    assert parse_answer('{"medications": []}') == []


# ------------------------------------------------------------------ scoring rules
def test_perfect_answer_passes_every_case(task, cases):
    for case in cases.values():
        s = score(task, case, truth_answer(case))
        assert s.passed and s.metrics["f1"] == 1.0 and s.metrics["name_accuracy"] == 1.0, case.case_id


def test_equivalent_answer_passes_order_display_and_code_form_do_not_matter(task, cases):
    case = with_verdicts(cases, *VERDICTS)
    items = [{"code": int(t["code"]) if i % 2 else f" {t['code']} ", "display": t["display"].upper() + " (daily)",
              "verdict": t["verdict"].upper()} for i, t in enumerate(reversed(case.truth))]
    s = score(task, case, items)
    assert s.passed and s.metrics["exact_match"] == 1.0
    assert s.metrics["name_accuracy"] == 0.0 and s.details["wrong_names"]  # names are reported apart


def test_a_display_that_names_no_drug_earns_no_credit(task, cases):
    case = with_verdicts(cases, *VERDICTS)
    items = [{**t, "display": "whatever"} for t in case.truth]
    s = score(task, case, items)
    assert not s.passed and s.metrics["tp"] == 0 and "unverifiable" in s.reason


@pytest.mark.parametrize("verdict", VERDICTS)
def test_each_verdict_class_wrong_verdict_fails_and_is_charged_to_both_classes(task, cases, verdict):
    case = with_verdicts(cases, verdict, "matched" if verdict != "matched" else "unreported")
    wrong = "matched" if verdict != "matched" else "unreported"
    items = truth_answer(case)
    target = next(i for i in items if i["verdict"] == verdict)
    target["verdict"] = wrong
    s = score(task, case, items)
    sv, sw = scorer.slug(verdict), scorer.slug(wrong)
    assert not s.passed and s.metrics["exact_match"] == 0.0
    assert s.metrics[f"{sv}_fn"] == 1 and s.metrics[f"{sw}_fp"] == 1
    assert s.details["wrong_verdict"] == [{"code": target["code"], "said": wrong, "truth": verdict}]
    assert f"{target['code']} said {wrong} (is {verdict})" in s.reason
    # the same answer with the verdict put right passes
    target["verdict"] = verdict
    assert score(task, case, items).passed


@pytest.mark.parametrize("verdict", VERDICTS)
def test_each_verdict_class_missing_item_loses_recall_of_that_class(task, cases, verdict):
    case = with_verdicts(cases, verdict)
    items = truth_answer(case)
    gone = next(i for i in items if i["verdict"] == verdict)
    items.remove(gone)
    s = score(task, case, items)
    assert not s.passed and s.metrics[f"{scorer.slug(verdict)}_fn"] == 1 and s.metrics["fp"] == 0
    assert s.details["missed"] == [{"code": gone["code"], "verdict": verdict}]
    assert s.metrics["recall"] < 1.0 and s.metrics["precision"] == 1.0


def test_extra_item_loses_precision(task, cases):
    case = with_verdicts(cases, "matched")
    items = truth_answer(case) + [{"code": "866924", "verdict": "unrecorded"}]
    s = score(task, case, items)
    assert not s.passed and s.metrics["unrecorded_fp"] == 1 and s.metrics["fn"] == 0
    assert s.details["extra"] == [{"code": "866924", "verdict": "unrecorded"}]


def test_a_code_under_two_verdicts_earns_credit_for_neither(task, cases):
    case = with_verdicts(cases, "matched", "stopped-but-taking")
    items = truth_answer(case)
    code = next(i["code"] for i in items if i["verdict"] == "stopped-but-taking")
    hedged = items + [{"code": code, "verdict": "matched"}]
    s = score(task, case, hedged)
    assert not s.passed and s.details["contradictions"] == [code]
    assert s.metrics["stopped_but_taking_tp"] == 0 and s.metrics["stopped_but_taking_fn"] == 1
    assert s.metrics["stopped_but_taking_fp"] == 1 and s.metrics["matched_fp"] == 1
    assert "contradictory verdicts" in s.reason
    # the same code twice under its one right verdict is a harmless repeat
    repeated = items + [{"code": code, "verdict": "stopped-but-taking"}]
    s = score(task, case, repeated)
    assert s.passed and s.details["duplicates"] == [code] and s.metrics["stopped_but_taking_tp"] == 1


def test_all_matched_agent_fails_exactly_the_cases_with_a_discrepancy(task, cases):
    failed = set()
    for cid, case in cases.items():
        s = score(task, case, [{"code": t["code"], "verdict": "matched"} for t in case.truth])
        if not s.passed:
            failed.add(cid)
    discrepant = {cid for cid, c in cases.items() if any(t["verdict"] != "matched" for t in c.truth)}
    assert failed == discrepant and 0 < len(discrepant) < len(cases)


def test_empty_answer_fails_with_recall_zero(task, cases):
    case = next(iter(cases.values()))
    s = score(task, case, [])
    assert not s.passed and s.metrics["recall"] == 0.0 and s.metrics["fn"] == len(case.truth)


# ------------------------------------------------------------------ unparsed, summary
def _result(case, s, outcome=None):
    return CaseResult(case_id=case.case_id, task="reconciliation", ground_truth=case.truth,
                      outcome=outcome or ("passed" if s.passed else "failed"), score=s.model_dump(mode="json"))


def test_unparsed_is_a_failure_with_every_metric_zero_and_truth_missed(task, cases):
    case = with_verdicts(cases, *VERDICTS)
    s = task.unparsed(case, "no JSON object found in the output")
    assert not s.passed and "parse error" in s.reason
    assert all(s.metrics[m] == 0.0 for m in scorer.PER_CASE)
    assert s.metrics["fn"] == len(case.truth)
    for v in VERDICTS:
        assert s.metrics[f"{scorer.slug(v)}_fn"] == sum(t["verdict"] == v for t in case.truth)
    from pytest_groundeval.model import per_case_counts

    assert per_case_counts(task.specs) <= set(s.metrics)


def test_summary_counts_errors_as_zero_with_their_truth_missed(task, cases):
    a, b = sorted(cases)[:2]
    ca, cb = cases[a], cases[b]
    good = _result(ca, score(task, ca, truth_answer(ca)))
    err = CaseResult(case_id=cb.case_id, task="reconciliation", outcome="error", ground_truth=cb.truth,
                     error={"kind": "agent", "message": "boom"})
    skipped = CaseResult(case_id="z", task="reconciliation", outcome="skipped", skip_reason="x")
    s = task.summarize([good, err, skipped])
    assert (s["n_cases"], s["n_passed"], s["n_errors"], s["n_skipped"]) == (2, 1, 1, 1)
    assert s["exact_match"] == 0.5 and s["macro_f1"] == 0.5
    assert s["fn"] == len(cb.truth) and s["tp"] == len(ca.truth)
    assert s["micro_recall"] == pytest.approx(len(ca.truth) / (len(ca.truth) + len(cb.truth)), abs=1e-6)
    matched_b = sum(t["verdict"] == "matched" for t in cb.truth)
    assert s["matched_recall"] < 1.0 or matched_b == 0
    assert s["exact_match_ci95"] == [0.094531, 0.905469]  # Wilson, 1 of 2 exact
    # a case error with no truth still counts one miss
    err0 = CaseResult(case_id="y", task="reconciliation", outcome="error", error={"kind": "case", "message": "bad"})
    assert task.summarize([err0])["fn"] == 1
    for key in task.metrics:
        assert key in s
    assert task.resolve_metric("f1") == "micro_f1" and task.resolve_metric("stopped_but_taking_f1")


# ------------------------------------------------------------------ the baseline
def test_baseline_uses_only_the_agent_inputs(task, cases):
    case = with_verdicts(cases, *VERDICTS)
    out = task.baseline(dict(case.inputs))
    assert task.score(task.parse(out), case).passed
    # the same inputs under another case file name give the same answer: no case-file access
    assert task.baseline({"bundle_json": case.inputs["bundle_json"],
                          "patient_report": case.inputs["patient_report"]}).text == out.text


def test_baseline_figures_on_the_committed_suite(task, cases):
    results, failing = [], {}
    for cid, case in sorted(cases.items()):
        s = task.score(task.parse(task.baseline(case.inputs)), case)
        results.append(_result(case, s))
        if not s.passed:
            failing[cid] = s.reason
    s = task.summarize(results)
    # An honest string matcher: it misses ingredient synonyms (alendronate for "Alendronic
    # acid") and a misspelt record display ("Simvistatin 10 MG"), which it then codes from
    # the catalog as unrecorded simvastatin.
    assert (s["n_cases"], s["n_passed"]) == (47, 39)
    assert sorted(failing) == sorted([
        "Devin_Bailey_17dc1d1b_a", "Kyla_Zulauf_4ac88c8f_a", "Kyla_Zulauf_4ac88c8f_b", "Kyla_Zulauf_4ac88c8f_c",
        "Lonnie_Von_28fbf0c8_a", "Lonnie_Von_28fbf0c8_b", "Tanner_Ondricka_43d11566_a", "Tanner_Ondricka_43d11566_b"])
    assert all("316672 said unreported" in r or "904419 said unreported" in r for r in failing.values()), failing
    assert s["micro_f1"] == pytest.approx(0.957806) and s["exact_match"] == pytest.approx(39 / 47, abs=1e-6)
    assert s["stopped_but_taking_f1"] == 1.0 and s["matched_precision"] == 1.0
    assert s["unreported_precision"] == pytest.approx(0.777778)


# ------------------------------------------------------------------ tools
def test_agent_tools_read_only_this_cases_bundle(task, cases):
    ids = sorted(cases)
    case, other = cases[ids[0]], next(cases[i] for i in ids if cases[i].inputs["bundle_json"] != cases[ids[0]].inputs["bundle_json"])
    tools = {t.name: t for t in task.agent_tools(case.inputs)}
    assert set(tools) == {"lookup_medication_code", "list_medication_requests"}
    bundle = json.loads(case.inputs["bundle_json"])
    statuses = ("active", "stopped", "completed")
    mine = set(distinct_codes(medication_requests(bundle, "b", statuses)))
    theirs = set(distinct_codes(medication_requests(json.loads(other.inputs["bundle_json"]), "o", statuses)))
    got = tools["list_medication_requests"].invoke({})
    assert {m["code"] for m in got["medication_requests"]} == mine
    assert not ({m["code"] for m in got["medication_requests"]} & (theirs - mine))
    active = tools["list_medication_requests"].invoke({"status": "active"})
    assert {m["code"] for m in active["medication_requests"]} == {t["code"] for t in case.truth
                                                                 if t["verdict"] in ("matched", "unreported")}
    assert all(m["status"] == "active" for m in active["medication_requests"])
    assert "error" in tools["list_medication_requests"].invoke({"status": "bogus"})
    assert "error" in json.loads(tools["list_medication_requests"].run({"status": 5}))
    hit = tools["lookup_medication_code"].invoke({"query": "Tylenol 325 mg"})
    assert hit["matches"][0]["code"] == "209387"
    # another case's tools are other tools over other data
    assert task.agent_tools(other.inputs)[1] is not tools["list_medication_requests"]
    assert task.agent_system_prompt and "list_medication_requests" in task.agent_system_prompt


def test_bundle_reader_errors_are_values():
    from pytest_groundeval.fhir.hc_tools import list_medication_requests

    assert "error" in list_medication_requests("{not json")
    assert "error" in list_medication_requests('{"resourceType": "Bundle"}', status="paused")


def test_one_file_holding_a_list_of_cases_runs_like_a_folder(tmp_path):
    """The cases of a folder, written as one JSON list (bundles relative to that file):
    the same cases, the same truth; each entry's content hash is its own."""
    import shutil

    folder = ROOT / "fixtures" / "reconciliation"
    by_folder = ReconciliationTask(folder)
    refs = by_folder.discover()[:3]
    items = []
    for ref in refs:
        item = json.loads(ref.path.read_text())
        shutil.copy(ref.path.parent / item["bundle"], tmp_path / Path(item["bundle"]).name)
        items.append({**item, "bundle": Path(item["bundle"]).name})
    (tmp_path / "cases.json").write_text(json.dumps(items))
    by_list = ReconciliationTask(tmp_path / "cases.json")
    listed = by_list.discover()
    assert [r.case_id for r in listed] == [r.case_id for r in refs]
    for a, b in zip(refs, listed):
        assert by_folder.load(a).truth == by_list.load(b).truth
    assert len({by_list.load(r).content_hash for r in listed}) == 3


def test_the_langgraph_agent_reconciles_through_tools_without_the_bundle_in_its_prompt():
    """A tool-using agent is given the patient and the intake note; it reads the record with
    the tools (a scripted model that lists the requests and calls every active one matched)."""
    pytest.importorskip("langchain.agents")
    from test_langgraph_agent import ScriptedChatModel, call, last_result, say

    from pytest_groundeval.agents.langgraph_agent import LangGraphAgent
    from pytest_groundeval.run.runner import run_case

    def answer(messages):
        listed = last_result(messages, "list_medication_requests")["medication_requests"]
        meds = {m["code"]: {"code": m["code"], "display": m["display"], "verdict": "matched"} for m in listed}
        return say(json.dumps({"medications": list(meds.values())}))

    task = ReconciliationTask(ROOT / "fixtures" / "reconciliation")
    ref = next(r for r in task.discover() if r.case_id.endswith("_a"))
    model = ScriptedChatModel(script=[call("list_medication_requests", {"status": "active"}), answer])
    result = run_case(task, ref, LangGraphAgent(model=model))
    assert model.seen, result.error
    human = next(m for m in model.seen[0] if m.type == "human").content
    case = task.load(ref)
    assert "Bundle:" not in human and '"resourceType"' not in human
    assert case.inputs["patient_report"] in human and "Patient/" in human
    assert result.outcome in ("passed", "failed") and result.score is not None  # scored, not an error
    tools = [t.tool for t in result.transcript]  # what the harness observed
    assert tools == ["list_medication_requests"]
    assert result.score.dimensions["grounded"].passed  # every code it answered, it had read


def test_generator_reads_gzipped_bundles_and_refuses_a_folder_with_none(tmp_path, capsys):
    """A Synthea output folder of ``.json.gz`` (as the suites and the other generators read it)
    gives the same cases as the plain files; a folder with no bundle is refused with a
    message naming it, and the --out folder's files are left alone (no "0 cases", exit 0)."""
    import gzip

    gen = _generator()
    names = sorted({json.loads((CASES / n).read_bytes())["bundle"].rsplit("/", 1)[-1]
                    for n in sorted(p.name for p in CASES.glob("*.json"))[:4]})
    plain, zipped = tmp_path / "plain", tmp_path / "zipped"
    plain.mkdir(), zipped.mkdir()
    for name in names:
        raw = (FIXTURES / "synthea" / name).read_bytes()
        (plain / name).write_bytes(raw)
        (zipped / (name + ".gz")).write_bytes(gzip.compress(raw))
    catalog = ["--catalog", str(FIXTURES / "terminology" / "rxnorm.json"), "--seed", "7"]
    assert gen.main(["--fixtures", str(plain), "--out", str(tmp_path / "a")] + catalog) == 0
    assert gen.main(["--fixtures", str(zipped), "--out", str(tmp_path / "b")] + catalog) == 0
    made = {p.name: json.loads(p.read_bytes()) for p in (tmp_path / "a").glob("*.json")}
    made_gz = {p.name: json.loads(p.read_bytes()) for p in (tmp_path / "b").glob("*.json")}
    assert made and sorted(made) == sorted(made_gz)
    for name, case in made.items():
        assert made_gz[name]["bundle"] == case["bundle"].replace("../plain/", "../zipped/") + ".gz"
        assert {k: v for k, v in made_gz[name].items() if k != "bundle"} == {k: v for k, v in case.items() if k != "bundle"}
    # the gzipped cases load through the task, with the same truth as the plain ones
    plain_cases = {r.case_id: ReconciliationTask(tmp_path / "a").load(r).truth for r in ReconciliationTask(tmp_path / "a").discover()}
    gz_task = ReconciliationTask(tmp_path / "b")
    assert {r.case_id: gz_task.load(r).truth for r in gz_task.discover()} == plain_cases
    capsys.readouterr()
    (tmp_path / "empty").mkdir()
    keep = tmp_path / "out" / "mine.json"
    keep.parent.mkdir()
    keep.write_text("{}")
    assert gen.main(["--fixtures", str(tmp_path / "empty"), "--out", str(keep.parent)] + catalog) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "empty") in err and "*.json.gz" in err and "nothing written" in err
    assert keep.read_text() == "{}"
