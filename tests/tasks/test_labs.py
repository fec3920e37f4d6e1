"""tasks/labs.py and its committed suite: the generator's truth checked by hand on real bundles,
the suite's spread, the generator's determinism, agents trying to pass without being right,
the baseline through pytest, the prompt, grounding and the report's view."""

from __future__ import annotations

import json
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest

import pytest_groundeval.tasks.labs  # noqa: F401  (imported in the outer process: see tests/conftest.py)
from pytest_groundeval.model import AgentOutput, Case
from pytest_groundeval.tasks.labs import LabsTask, baseline_answer, parse_answer

ROOT = Path(__file__).resolve().parents[2]
LABS = ROOT / "fixtures" / "labs"
SMART_DIR = ROOT.parent / "shared" / "data" / "synthea-r4"

TASK = LabsTask(LABS)


def load(case_id: str) -> Case:
    ref = next(r for r in TASK.discover() if r.case_id == case_id)
    return TASK.load(ref)


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return [TASK.load(ref) for ref in TASK.discover()]


# ---------------------------------------------------------------- the truth, checked by hand
# Each expectation below was read off the bundle's Observations by hand (the dates, values and
# ids printed from the raw JSON, then the rule applied on paper), not computed by the task.
def test_hand_checked_hba1c_before_a_later_higher_one():
    # HbA1c: 2014-01-31 5.07 %, 2016-02-05 6.21, 2018-02-09 5.85, 2020-02-14 5.85; today 2014-08-28
    t = load("Reuben_Lind_1d03714f_threshold_hba1c_ge_6_5").truth
    assert t["result"]["observation"].startswith("Observation/d948d21f")
    assert t["result"]["value"] == pytest.approx(5.0708, abs=1e-4) and t["result"]["effective"][:10] == "2014-01-31"
    assert t["result"]["unit"] == "%" and t["flag"] is False and t["no_result"] is False


def test_hand_checked_blood_pressure_from_the_panel_components():
    # 55284-4 panels: ... 2018-03-28 167.38/106.84, 2020-04-01 151.42/104.45; today 2019-08-17
    t = load("Gloria_Covarrubias_15044ad5_threshold_bp_ge_140_90").truth
    assert t["result"]["observation"].startswith("Observation/9751e4f0")
    assert t["result"]["systolic"] == pytest.approx(167.385, abs=1e-3)
    assert t["result"]["diastolic"] == pytest.approx(106.840, abs=1e-3)
    assert t["result"]["unit"] == "mm[Hg]" and t["flag"] is True


def test_hand_checked_no_result_when_the_only_potassium_is_after_today():
    # one potassium, 2020-04-13 4.68 mmol/L; today 2018-04-20
    t = load("Angelic_Mueller_29d755a6_threshold_potassium_outside_3_5_5_1").truth
    assert t["no_result"] is True and t["result"] is None and t["flag"] is None
    assert "1 result(s) dated after today" in t["why"]


def test_hand_checked_egfr_decline_over_the_two_years_up_to_today():
    # eGFR ... 2016-03-02 107.23 (before 2016-04-23), 2017-03-08 140.40, 2018-03-14 99.45, 2019-03-20 ...;
    # today 2018-04-23: baseline 140.40, latest 99.45, decline (140.40 - 99.45) / 140.40 = 29.2 % > 25 %
    t = load("Adalberto_Hartmann_44ec4447_change_egfr_decline").truth
    assert t["window_start"] == "2016-04-23"
    assert t["baseline"]["observation"].startswith("Observation/18da5617")
    assert t["result"]["observation"].startswith("Observation/f1f2e6db")
    assert t["decline_pct"] == pytest.approx(29.17, abs=0.01) and t["flag"] is True


# ---------------------------------------------------------------- the suite
def test_the_suite_has_a_spread_of_every_question_and_of_no_results(cases):
    assert len(cases) >= 60
    kinds = Counter((c.truth["kind"], c.truth["no_result"]) for c in cases)
    for kind in ("latest", "threshold", "change"):
        assert kinds[(kind, False)] >= 10 and kinds[(kind, True)] >= 4, kinds
    flags = Counter((c.truth["criterion"], c.truth["flag"]) for c in cases if c.truth["flag"] is not None)
    for criterion in ("hba1c_ge_6.5", "egfr_lt_60", "potassium_outside_3.5_5.1", "bp_ge_140_90", None):
        if criterion is None:  # the change question
            assert flags[(None, True)] >= 3 and flags[(None, False)] >= 3
        else:
            assert flags[(criterion, True)] >= 3 and flags[(criterion, False)] >= 3, criterion
    assert {c.truth["analyte"] for c in cases} == {"hba1c", "egfr", "potassium", "glucose", "creatinine", "weight",
                                                   "bp"}
    # the traps are there: results dated after today, and no result for three reasons
    later = sum(1 for c in cases if not c.truth["no_result"] and any(
        o["resource"].get("effectiveDateTime", "")[:10] > c.inputs["today"] for o in c.inputs["bundle"]["entry"]
        if o["resource"].get("code", {}).get("coding", [{}])[0].get("code") == c.truth["loinc"]))
    assert later >= 10
    situations = Counter(json.loads(c.ref.path.read_text())["situation"] for c in cases if c.truth["no_result"])
    assert {"never", "only later results", "stale", "change"} <= set(situations), situations


def test_the_prompt_names_the_server_slot_the_patient_and_today_and_never_the_truth(cases):
    for c in cases:
        assert "{fhir_base_url}" in c.prompt and f"Patient/{c.inputs['patient_id']}" in c.prompt
        assert f"Today: {c.inputs['today']}" in c.prompt
        assert set(c.inputs) == {"bundle", "patient_id", "today", "question"}
        if c.truth["result"]:
            assert f"{c.truth['result'].get('value', c.truth['result'].get('systolic')):g}" not in c.prompt


@pytest.mark.skipif(not SMART_DIR.is_dir(), reason=f"shared Synthea R4 sample data not found at {SMART_DIR}")
def test_the_generator_rebuilds_the_committed_suite_byte_for_byte(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import make_labs_cases
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert make_labs_cases.main(["--source", str(SMART_DIR), "--out", str(tmp_path), "--seed", "18"]) == 0
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.json"))
    committed = sorted(p.relative_to(LABS) for p in LABS.rglob("*.json"))
    assert made == committed
    assert all((tmp_path / p).read_bytes() == (LABS / p).read_bytes() for p in made)
    assert "68 cases over" in capsys.readouterr().out


# ---------------------------------------------------------------- agents that try to pass without being right
def _strategy_passes(cases, answer) -> tuple[int, int]:
    passed = sum(TASK.score(parse_answer(answer(c)), c).passed for c in cases)
    return passed, len(cases)


def _rows(c, *, ignore_today=False, earliest=False):
    """A reader of the record that breaks one rule: no "as of today", or the earliest result."""
    inputs = dict(c.inputs)
    if ignore_today:
        inputs["today"] = "2100-01-01"
        inputs["question"] = {k: v for k, v in c.inputs["question"].items() if k != "within_months"}
    text = baseline_answer(inputs)
    if earliest and c.truth["kind"] == "latest":
        inputs["today"] = c.inputs["today"]
        entries = sorted((e for e in inputs["bundle"]["entry"]
                          if e["resource"].get("code", {}).get("coding", [{}])[0].get("code") == c.truth["loinc"]),
                         key=lambda e: e["resource"]["effectiveDateTime"])
        if entries:
            inputs["bundle"] = {"entry": [inputs["bundle"]["entry"][0], entries[0]]}
            text = baseline_answer(inputs)
    return text


def test_always_abstaining_passes_only_the_no_result_cases(cases):
    passed, n = _strategy_passes(cases, lambda c: '{"no_result": true}')
    assert passed == sum(c.truth["no_result"] for c in cases) and passed <= n * 0.3


def test_reading_past_today_fails_every_case_whose_record_has_later_or_outside_results(cases):
    passed, n = _strategy_passes(cases, lambda c: _rows(c, ignore_today=True))
    assert passed <= n * 0.55, (passed, n)


def test_the_earliest_result_fails_the_latest_questions(cases):
    latest = [c for c in cases if c.truth["kind"] == "latest" and not c.truth["no_result"]]
    passed, n = _strategy_passes(latest, lambda c: _rows(c, earliest=True))
    assert passed <= n * 0.2, (passed, n)


def test_the_right_value_in_another_form_still_passes(cases):
    """The baseline's answer with the record's full-precision values and dateTimes passes too."""
    for c in cases[:20]:
        if c.truth["no_result"]:
            continue
        ans = json.loads(baseline_answer(c.inputs))
        for key in ("value", "systolic", "diastolic"):
            if key in ans:
                ans[key] = str(c.truth["result"][key])
        ans["effective"] = c.truth["result"]["effective"]
        assert TASK.score(parse_answer(json.dumps(ans)), c).passed, c.case_id


# ---------------------------------------------------------------- the baseline, through pytest
EVAL = '''
import pytest

@pytest.mark.labs
def test_labs(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
'''


def test_the_baseline_passes_every_case_through_pytest(pytester):
    pytester.makepyfile(test_labs_suite=EVAL)
    data = pytester.mkdir("labs")
    shutil.copytree(LABS / "bundles", data / "bundles")
    for p in sorted(LABS.glob("*.json")):
        shutil.copy(p, data / p.name)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "--agent=baseline", "--labs-cases", str(data),
                                           "--run-record", "record.json", "-q")
    record = json.loads((pytester.path / "record.json").read_text())
    n = len(list(LABS.glob("*.json")))
    summary = record["summary"]["labs"]
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert summary["n_cases"] == n and summary["n_passed"] == n
    assert summary["pass"] == 1.0 and summary["no_result_pass_n"] >= 12 and summary["flag_n"] >= 30
    assert set(summary["specs"]) == {"pass", "abstention", "value", "unit", "date", "flag", "latest_pass",
                                     "threshold_pass", "change_pass", "no_result_pass"}
    case = next(c for c in record["cases"] if c["case_id"] == "Gloria_Covarrubias_15044ad5_threshold_bp_ge_140_90")
    assert case["ground_truth"]["flag"] is True and case["predicted"]["systolic"] == 167.0


# ---------------------------------------------------------------- answers, grounding, the report
def test_a_fenced_answer_with_prose_around_it_is_read():
    text = 'The latest HbA1c is below.\n```json\n{"value": "6.8", "unit": "%", "effective": "2019-02-01", ' \
           '"flag": "false"}\n```'
    assert parse_answer(text) == {"no_result": False, "value": 6.8, "systolic": None, "diastolic": None,
                                  "baseline_value": None, "unit": "%", "effective": "2019-02-01",
                                  "baseline_effective": None, "flag": False, "hedges": []}


def test_grounding_reads_the_answers_numbers_and_dates_from_tool_results():
    pred = parse_answer('{"value": 6.8, "unit": "%", "effective": "2019-02-01", "flag": true}')
    assert TASK.grounding_values(pred) == {"number": ["6.8"], "date": ["2019-02-01"]}
    number, day = TASK.grounding_matchers["number"], TASK.grounding_matchers["date"]
    read = '{"effectiveDateTime": "2019-02-01T08:30:00+00:00", "valueQuantity": {"value": 6.8312, "code": "%"}}'
    assert number("6.8", read) and day("2019-02-01", read)
    assert not number("6.9", read) and not number("8", read) and number("6.83", read) and number("7", read)
    assert not day("2019-02-11", read) and not day("2019-02-0", read)
    assert TASK.grounding_values(parse_answer('{"no_result": true}')) == {}


def test_the_view_shows_the_answering_result_beside_the_answer():
    c = load("Gloria_Covarrubias_15044ad5_threshold_bp_ge_140_90")
    pred = parse_answer(baseline_answer(c.inputs))
    view = LabsTask.view({"ground_truth": c.truth, "predicted": pred})
    (truth,), (answer,) = view.truth, view.predicted
    assert truth.code == answer.code == "85354-9"
    assert truth.display == "167.385/106.84 mm[Hg] on 2018-03-28" and truth.verdict == "flag true"
    assert answer.display == "167/107 mm[Hg] on 2018-03-28" and answer.verdict == "flag true"
    none = LabsTask.view({"ground_truth": load("Angelic_Mueller_29d755a6_threshold_potassium_outside_3_5_5_1").truth,
                          "predicted": None})
    assert none.truth[0].verdict == "no result" and none.predicted is None
    assert LabsTask.view({"ground_truth": [1, 2], "predicted": "x"}) is None


def test_the_baseline_is_the_tasks_own_offline_strategy():
    c = load("Reuben_Lind_1d03714f_threshold_hba1c_ge_6_5")
    out = TASK.baseline(c.inputs)
    assert isinstance(out, AgentOutput) and json.loads(out.text) == {"value": 5.1, "unit": "%",
                                                                     "effective": "2014-01-31", "flag": False}


# ---------------------------------------------------------------- truths with more than one meaning are refused
def _record(*observations):
    def obs(oid, when, value, unit="%", code="4548-4"):
        q = {"value": value, "system": "http://unitsofmeasure.org"}
        if unit:
            q.update(unit=unit, code=unit)
        return {"resourceType": "Observation", "id": oid, "status": "final", "subject": {"reference": "Patient/p"},
                "code": {"coding": [{"system": "http://loinc.org", "code": code}]}, "effectiveDateTime": when,
                "valueQuantity": q}

    return {"resourceType": "Bundle", "entry": [{"resource": {"resourceType": "Patient", "id": "p"}}]
            + [{"resource": obs(*o)} for o in observations]}


@pytest.mark.parametrize("name,record,question,why", [
    ("a value within half a step of the threshold", _record(("a", "2019-01-01", 6.47)),
     {"kind": "threshold", "criterion": "hba1c_ge_6.5"}, "within 0.05 of the threshold 6.5"),
    ("two results at the latest time", _record(("a", "2019-01-01T10:00:00Z", 6.1), ("b", "2019-01-01T10:00:00Z", 6.9)),
     {"kind": "latest", "analyte": "hba1c"}, "two results at the latest time"),
    ("an answering result without a unit", _record(("a", "2019-01-01", 6.1, None)),
     {"kind": "latest", "analyte": "hba1c"}, "has no unit"),
    ("a decline within reading precision of 25 %",
     _record(("a", "2018-01-01", 80.0, "mL/min", "33914-3"), ("b", "2019-01-01", 60.2, "mL/min", "33914-3")),
     {"kind": "change"}, "within reading precision of 25 %"),
])
def test_a_truth_with_two_readings_is_refused(name, record, question, why):
    from datetime import date

    from pytest_groundeval.model import CaseError
    from pytest_groundeval.tasks.labs import derive_truth

    with pytest.raises(CaseError, match=why):
        derive_truth(record, question, date(2019, 3, 1))


def test_identical_duplicates_are_one_result_and_a_clear_decline_is_flagged():
    from datetime import date

    from pytest_groundeval.tasks.labs import derive_truth

    dup = _record(("a", "2019-01-01T10:00:00Z", 6.1), ("b", "2019-01-01T10:00:00Z", 6.1))
    assert derive_truth(dup, {"kind": "latest", "analyte": "hba1c"}, date(2019, 3, 1))["result"]["value"] == 6.1
    clear = _record(("a", "2018-01-01", 80.0, "mL/min", "33914-3"), ("b", "2019-01-01", 58.0, "mL/min", "33914-3"))
    assert derive_truth(clear, {"kind": "change"}, date(2019, 3, 1))["flag"] is True


def test_a_case_whose_record_contradicts_its_expectation_is_refused(tmp_path):
    from pytest_groundeval.model import CaseError

    case = json.loads((LABS / "Angelic_Mueller_29d755a6_threshold_potassium_outside_3_5_5_1.json").read_text())
    case["expect"] = "result"
    (tmp_path / "bundles").mkdir()
    shutil.copy(LABS / case["bundle"], tmp_path / case["bundle"])
    (tmp_path / f"{case['case_id']}.json").write_text(json.dumps(case))
    task = LabsTask(tmp_path)
    with pytest.raises(CaseError, match="expects 'result' but the record gives 'no_result'"):
        task.load(task.discover()[0])


def test_grounded_needs_the_answered_value_and_date_in_a_search_result_received_before_the_answer():
    from pytest_groundeval.run.runner import score_case

    c = load("Reuben_Lind_1d03714f_threshold_hba1c_ge_6_5")
    answer = AgentOutput(text='{"value": 5.1, "unit": "%", "effective": "2014-01-31", "flag": false}')
    read = {"resourceType": "Bundle", "entry": [{"resource": {
        "resourceType": "Observation", "id": "d948d21f", "effectiveDateTime": "2014-01-31T19:47:34+00:00",
        "valueQuantity": {"value": 5.070760753098821, "code": "%"}}}]}
    call = {"seq": 1, "tool": "fhir_search", "args": {"resource_type": "Observation", "params": {}},
            "result": read, "status": "ok", "started": 1, "ended": 2}
    ok = score_case(TASK, c, answer, observed=[call], offered=["fhir_search", "fhir_read"])
    assert ok["outcome"] == "passed" and ok["score"].metrics["grounded"] == 1.0
    other = {**call, "result": {"resourceType": "Bundle", "entry": [{"resource": {
        "resourceType": "Observation", "effectiveDateTime": "2016-02-05T19:47:34+00:00",
        "valueQuantity": {"value": 6.210766963479431, "code": "%"}}}]}}
    bad = score_case(TASK, c, answer, observed=[other], offered=["fhir_search", "fhir_read"])
    assert bad["score"].metrics["grounded"] == 0.0
    assert bad["score"].details["ungrounded"] == {"number": ["5.1"], "date": ["2014-01-31"]}
    nothing = score_case(TASK, c, answer, observed=[], offered=["fhir_search", "fhir_read"])
    assert nothing["score"].metrics["grounded"] == 0.0  # answered from memory: no call at all


# ---------------------------------------------------------------- the adversarial audit (helper labs)
SEARCH = json.dumps({"resourceType": "Bundle", "total": 5, "meta": {"lastUpdated": "2019-03-01T00:00:00Z"},
                     "entry": [{"fullUrl": "http://127.0.0.1:8080/case/85ab3c2e/fhir/R4/Observation/85ab3c2e-4720",
                                "resource": {"resourceType": "Observation", "id": "85ab3c2e-4720-4c1f",
                                             "meta": {"lastUpdated": "2019-03-01T00:00:00Z"},
                                             "effectiveDateTime": "2019-02-01T08:30:00-05:00",
                                             "referenceRange": [{"low": {"value": 3.5}, "high": {"value": 5.6}}],
                                             "valueQuantity": {"value": 6.83, "code": "%"}}}]})


@pytest.mark.parametrize("value,ok", [
    ("6.8", True), ("6.83", True), ("7", True), ("3.5", True), ("5.6", True),  # a Quantity's value
    ("5", False),  # the search's total
    ("85", False), ("4720", False), ("8080", False),  # digits of an id, a URL
    ("30", False), ("0", False), ("2019", False), ("1", False), ("8", False),  # digits of a date or a time
    ("6.9", False),
])
def test_grounding_counts_a_quantitys_value_not_any_digits_in_the_result(value, ok):
    """A number from memory is not grounded by a search result's ids, dates, times or total."""
    assert TASK.grounding_matchers["number"](value, SEARCH) is ok


@pytest.mark.parametrize("day,ok", [("2019-02-01", True), ("2019-03-01", False), ("2019-02-0", False)])
def test_grounding_counts_an_effective_date_not_the_servers_timestamps(day, ok):
    assert TASK.grounding_matchers["date"](day, SEARCH) is ok


def test_grounding_reads_a_result_handed_on_as_json_text_in_a_wrapper():
    wrapped = json.dumps({"content": [{"type": "text", "text": SEARCH}], "isError": False})
    number, day = TASK.grounding_matchers["number"], TASK.grounding_matchers["date"]
    assert number("6.8", wrapped) and day("2019-02-01", wrapped)
    assert not number("85", wrapped) and not day("2019-03-01", wrapped)


def test_grounding_in_text_that_is_not_json_reads_numbers_standing_alone():
    text = "HbA1c 6.83 % on 2019-02-01 at 08:30, Observation 85ab3c2e-4720"
    number, day = TASK.grounding_matchers["number"], TASK.grounding_matchers["date"]
    assert number("6.8", text) and day("2019-02-01", text)
    assert not any(number(v, text) for v in ("85", "4720", "30", "2019", "8"))


def test_a_result_given_as_a_bound_is_no_value_to_read():
    """An eGFR of ">90" (valueQuantity.comparator) is not 90: a case whose answering result is
    a bound is refused; a bound that does not answer the question is no concern."""
    from datetime import date

    from pytest_groundeval.model import CaseError
    from pytest_groundeval.tasks.labs import derive_truth

    record = _record(("a", "2018-01-01", 70.0, "mL/min", "33914-3"), ("b", "2019-01-01", 90.0, "mL/min", "33914-3"))
    record["entry"][2]["resource"]["valueQuantity"]["comparator"] = ">"
    with pytest.raises(CaseError, match="comparator"):
        derive_truth(record, {"kind": "latest", "analyte": "egfr"}, date(2019, 3, 1))
    with pytest.raises(CaseError, match="comparator"):
        derive_truth(record, {"kind": "change"}, date(2019, 3, 1))
    assert derive_truth(record, {"kind": "latest", "analyte": "egfr"}, date(2018, 6, 1))["result"]["value"] == 70.0
    record["entry"][1]["resource"]["valueQuantity"]["comparator"] = "<"  # the baseline of a change question
    with pytest.raises(CaseError, match="comparator"):
        derive_truth(record, {"kind": "change"}, date(2019, 3, 1))
    panel = {"resourceType": "Observation", "id": "bp", "status": "final", "subject": {"reference": "Patient/p"},
             "code": {"coding": [{"system": "http://loinc.org", "code": "85354-9"}]},
             "effectiveDateTime": "2019-01-01", "component": [
                 {"code": {"coding": [{"system": "http://loinc.org", "code": c}]},
                  "valueQuantity": {"value": v, "code": "mm[Hg]", **({"comparator": ">"} if c == "8480-6" else {})}}
                 for c, v in (("8480-6", 200.0), ("8462-4", 95.0))]}
    with pytest.raises(CaseError, match="comparator"):
        derive_truth({"resourceType": "Bundle", "entry": [record["entry"][0], {"resource": panel}]},
                     {"kind": "threshold", "criterion": "bp_ge_140_90"}, date(2019, 3, 1))


def test_never_abstaining_fails_every_no_result_case(cases):
    """The reverse of always abstaining: the newest value of the record whatever the date or
    window, and a made-up one where the record has none."""
    none = [c for c in cases if c.truth["no_result"]]
    made_up = json.dumps({"value": 1, "baseline_value": 2, "systolic": 120, "diastolic": 80, "unit": "%",
                          "effective": "2000-01-01", "baseline_effective": "1999-01-01", "flag": False})
    answers = {c.case_id: _rows(c, ignore_today=True) for c in none}
    answers = {k: made_up if '"no_result"' in a else a for k, a in answers.items()}
    assert sum(a != made_up for a in answers.values()) >= 5  # read from the record: later or older results
    passed, n = _strategy_passes(none, lambda c: answers[c.case_id])
    assert passed == 0 and n >= 12, (passed, n)


def test_another_patients_result_fails(cases):
    """An agent that reads another patient's record (the same question, another case's answer)."""
    by_question: dict[str, list[Case]] = {}
    for c in cases:
        if not c.truth["no_result"]:
            by_question.setdefault(json.dumps(c.inputs["question"], sort_keys=True), []).append(c)
    tried = passed = 0
    for group in by_question.values():
        for c, other in zip(group, group[1:] + group[:1]):
            if other.inputs["patient_id"] == c.inputs["patient_id"]:
                continue
            tried += 1
            passed += TASK.score(parse_answer(baseline_answer(other.inputs)), c).passed
    assert tried >= 30 and passed == 0, (passed, tried)


def test_hedging_the_value_across_a_threshold_fails_every_flagged_case(cases):
    """Two answers in one: the value as ``value`` and another under ``baseline_value``, or a key
    given twice. Never scored as the one that happens to be right."""
    flagged = [c for c in cases if c.truth["flag"] is not None and c.truth["kind"] == "threshold"]
    for c in flagged:
        right = json.loads(baseline_answer(c.inputs))
        hedge = {**right, "baseline_value": 1.0}
        assert not TASK.score(parse_answer(json.dumps(hedge)), c).passed, c.case_id
        body = json.dumps(right)[1:-1]
        twice = "{" + body + ', "flag": ' + json.dumps(not right["flag"]) + "}"
        with pytest.raises(Exception, match="more than once"):
            parse_answer(twice)


def _shift(day: str, days: int) -> str:
    from datetime import date, timedelta

    return (date.fromisoformat(day) + timedelta(days=days)).isoformat()


def test_every_case_fails_each_field_broken_and_passes_each_equivalent(cases):
    """Over the whole suite, the baseline's right answer mutated one field at a time: one
    reading step off, a day off, the flag flipped, another analyte's unit, the same unit in
    another UCUM spelling, the same instant in another offset."""
    units = {"%", "mL/min/{1.73_m2}", "mmol/L", "mg/dL", "kg", "mm[Hg]"}
    broken = fine = 0
    for c in cases:
        if c.truth["no_result"]:
            continue
        right = json.loads(baseline_answer(c.inputs))
        step = c.truth["result"]["step"]
        wrong = []
        for key in ("value", "systolic", "diastolic", "baseline_value"):
            if key in right:
                wrong += [{**right, key: right[key] + step}, {**right, key: right[key] - step}]
        for key in ("effective", "baseline_effective"):
            if key in right:
                wrong += [{**right, key: _shift(right[key], 1)}, {**right, key: _shift(right[key], -1)}]
        if "flag" in right:
            wrong.append({**right, "flag": not right["flag"]})
        same = units - {right["unit"]} - ({"mL/min/{1.73_m2}"} if right["unit"] == "mL/min" else set())
        wrong += [{**right, "unit": u} for u in sorted(same)]
        for w in wrong:
            assert not TASK.score(parse_answer(json.dumps(w)), c).passed, (c.case_id, w)
        broken += len(wrong)
        spelled = {"mmol/L": "mmol/l", "mg/dL": "mg/dl", "%": "10*-2", "kg": "10*3.g", "mm[Hg]": "mm[Hg]{x}",
                   "mL/min": "mL/min{x}", "mL/min/{1.73_m2}": "mL/min"}[right["unit"]]
        when = c.truth["result"]["effective"]
        equivalent = [{**right, "unit": spelled}, {**right, "effective": when}]
        for e in equivalent:
            assert TASK.score(parse_answer(json.dumps(e)), c).passed, (c.case_id, e)
        fine += len(equivalent)
    assert broken >= 400 and fine >= 100, (broken, fine)
