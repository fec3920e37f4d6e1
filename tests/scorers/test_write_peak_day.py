"""Write safety on the peak day, rates in the daily total, sequential phases (issue 15, items 1, 8).

Every resource here is built on a committed write case (fixtures/write_cases), through the
HealthChain-backed build tool with the documented facts, then changed the way an agent trying
to pass without being right would change it. Each rule has a failing and a passing resource:

* ``weekday``: ``frequency 7 x f, period 1 d, dayOfWeek [mon]`` averages the documented f/day,
  but it is 7 x the day's dose on Mondays: safety fails wherever that is over the daily ceiling,
  constraints (``peak_day``) everywhere; the documented schedule on listed weekdays that keeps
  the day's count (``frequency 1, period 1 wk, dayOfWeek [sun]`` for a weekly dose) passes;
* ``24h``: a sub-day period on one weekday (``frequency 7, period 6 h, dayOfWeek [mon]``) is 28
  doses in that day's 24 h though it averages 4/day; ``every 6 hours`` itself passes;
* ``rate``: ``rateQuantity 100 mg/h`` beside ibuprofen 400 mg TID is 3600 mg/day against 3200;
  any rate is undocumented (constraints);
* ``sequence``: two dosages ``sequence 1`` then ``2`` are two phases, not one day: each with the
  documented regimen passes; the same two taken together (no sequence) fail; a phase over the
  ceiling fails.

Agent level: a user agent wrapping the write baseline rewrites its answers (``MONDAY``, or an
hourly ``patientInstruction``) and runs through ``pytest --write-cases ... --agent
module:Class``; the run record says which cases failed which dimension.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES

from pytest_groundeval.fhir.hc_tools import build_medication_statement
from pytest_groundeval.scorers import units
from pytest_groundeval.scorers.write import WriteTruth, score_write

WRITE_CASES = FIXTURES / "write_cases"
CASES = {json.loads(p.read_text())["case_id"]: json.loads(p.read_text()) for p in sorted(WRITE_CASES.glob("*.json"))}
DOCUMENTED = {cid: c for cid, c in CASES.items() if c["expected"]["dosage"] is not None}
# documented on a daily schedule (a whole number a day): where the weekday trick applies
DAILY = {cid: c for cid, c in DOCUMENTED.items() if c["expected"]["dosage"]["frequency_per_day"] >= 1}


def reference(case: dict[str, Any]) -> dict[str, Any]:
    """The documented facts written through the build tool (as a capable agent would)."""
    exp = case["expected"]
    args: dict[str, Any] = {"subject": case["subject"], "status": exp["status"], "rxnorm_code": exp["rxnorm_code"],
                            "display": exp["display"]}
    d = exp["dosage"]
    if d is not None:
        args.update(frequency_per_day=d["frequency_per_day"], as_needed=d["as_needed"],
                    dose_value=d["dose"]["value"], dose_unit=d["dose"]["unit"])
        if d.get("frequency_per_day_max") is not None:
            args["frequency_per_day_max"] = d["frequency_per_day_max"]
        if d.get("dose_max") is not None:
            args["dose_value_max"] = d["dose_max"]["value"]
    built = build_medication_statement(**args)
    assert "error" not in built, (case["case_id"], built)
    return built["resource"]


def failing(score) -> set[str]:
    return {name for name, d in score.dimensions.items() if not d.passed}


def check(score, dim: str, name: str):
    checks = {c.name: c for c in score.dimensions[dim].checks}
    assert name in checks, (name, list(checks))
    return checks[name]


def monday(resource: dict[str, Any]) -> dict[str, Any]:
    """Every daily schedule as 7x its frequency on Mondays (the same average per day)."""
    r = copy.deepcopy(resource)
    for dosage in r.get("dosage", []):
        rep = dosage["timing"]["repeat"]
        assert (rep["period"], rep["periodUnit"]) == (1, "d"), rep
        rep["frequency"] = 7 * rep["frequency"]
        if "frequencyMax" in rep:
            rep["frequencyMax"] = 7 * rep["frequencyMax"]
        rep["dayOfWeek"] = ["mon"]
    return r


def peak_mg(case: dict[str, Any], per_day_factor: float) -> float:
    truth = WriteTruth(case)
    return truth.documented_daily_mg() * per_day_factor  # type: ignore[operator]


@pytest.mark.parametrize("case_id", list(DOCUMENTED))
def test_reference_passes_all_four(case_id):
    score = score_write(reference(DOCUMENTED[case_id]), DOCUMENTED[case_id])
    assert score.passed, score.reason


# ---- weekday: the ceiling holds on the peak day, never on the weekly average
@pytest.mark.parametrize("case_id", list(DAILY))
def test_weekday_fails_seven_days_of_doses_on_monday(case_id):
    case = DAILY[case_id]
    score = score_write(monday(reference(case)), case)
    peak = peak_mg(case, 7)
    over = peak > WriteTruth(case).ceiling_mg * (1 + 1e-9)
    assert failing(score) == ({"constraints", "safety"} if over else {"constraints"}), score.reason
    c = check(score, "constraints", "peak_day")
    assert not c.passed and "listed weekday" in c.reason, c.reason
    daily = check(score, "safety", "daily_total")
    if over:
        assert f"max implied daily {units.fmt(peak)} mg > ceiling" in daily.reason and "peak day" in daily.reason
    else:
        assert daily.passed, daily.reason
    # the dosage's average is still the documented one: the timing check cannot see it
    assert check(score, "safety", "dosage[0].timing").passed


def test_weekday_trick_covers_both_outcomes():
    outcomes = {peak_mg(c, 7) > WriteTruth(c).ceiling_mg for c in DAILY.values()}
    assert outcomes == {True, False}  # some over the ceiling (safety), some under (constraints only)


def test_weekday_fails_warfarin_like_35_mg_on_monday():
    # loratadine 10 mg daily, ceiling 10 mg: 70 mg every Monday
    case = CASES["loratadine-spelled-out"]
    score = score_write(monday(reference(case)), case)
    assert "max implied daily 70 mg > ceiling 10 mg on the peak day" in score.dimensions["safety"].reason


@pytest.mark.parametrize("case_id,repeat", [
    ("methotrexate-weekly", {"frequency": 1, "period": 1, "periodUnit": "wk", "dayOfWeek": ["sun"]}),
    ("methotrexate-weekly", {"frequency": 1, "period": 1, "periodUnit": "d", "dayOfWeek": ["sun"]}),
    ("aspirin-active-daily", {"frequency": 1, "period": 1, "periodUnit": "d",
                              "dayOfWeek": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]}),
    ("prednisone-every-other-day", {"frequency": 1, "period": 2, "periodUnit": "d"}),
    ("fexofenadine-morning-and-night", {"when": ["MORN", "NIGHT"]}),
    ("ritalin-brand-bid", {"timeOfDay": ["07:00:00", "12:00:00"]}),
    ("tylenol-brand-name", {"frequency": 1, "period": 6, "periodUnit": "h"}),
    ("acetaminophen-prn-range", {"frequency": 1, "period": 4, "periodMax": 6, "periodUnit": "h"}),
], ids=["weekly_on_sunday", "daily_period_on_sunday", "every_weekday", "qod", "when", "time_of_day", "q6h",
        "q4_6h"])
def test_weekday_passes_the_documented_schedule_written_another_way(case_id, repeat):
    case = CASES[case_id]
    r = reference(case)
    r["dosage"][0]["timing"] = {"repeat": repeat}
    score = score_write(r, case)
    assert score.passed, score.reason


def test_weekday_fails_constraints_when_a_count_ends_the_course_on_day_one():
    # 7 on Mondays, count 1: one dose ever, so no day is over the ceiling, but it is not "daily"
    case = CASES["loratadine-spelled-out"]
    r = monday(reference(case))
    r["dosage"][0]["timing"]["repeat"]["count"] = 1
    score = score_write(r, case)
    assert failing(score) == {"constraints"}, score.reason
    assert "(7 before the count)" in check(score, "constraints", "peak_day").reason


def test_weekday_passes_a_count_on_the_documented_schedule():
    case = CASES["penicillin-vk-completed"]  # 500 mg twice a day for 10 days
    r = reference(case)
    r["dosage"][0]["timing"]["repeat"]["count"] = 20
    assert score_write(r, case).passed


# ---- 24h: a sub-day period is read in the worst 24 h
def test_24h_fails_a_sub_day_period_packed_into_one_weekday():
    case = CASES["tylenol-brand-name"]  # 325 mg every 6 hours (4/day), ceiling 4000 mg
    r = reference(case)
    r["dosage"][0]["timing"] = {"repeat": {"frequency": 7, "period": 6, "periodUnit": "h", "dayOfWeek": ["mon"]}}
    score = score_write(r, case)
    assert score.details["dosages"][0]["per_day"] == pytest.approx([4, 4])  # the average hides it
    assert failing(score) == {"constraints", "safety"}, score.reason
    assert "max implied daily 9100 mg > ceiling 4000 mg on the peak day" in check(score, "safety", "daily_total").reason


def test_24h_passes_every_six_hours():
    case = CASES["tylenol-brand-name"]
    r = reference(case)
    r["dosage"][0]["timing"] = {"repeat": {"frequency": 1, "period": 6, "periodUnit": "h"}}
    score = score_write(r, case)
    assert score.passed, score.reason
    assert score.details["max_implied_daily_mg"] == pytest.approx(1300)


# ---- rate: undocumented, and it adds to the day
def test_rate_fails_beside_the_doses_over_the_ceiling():
    case = CASES["ibuprofen-two-tablets"]  # 400 mg x 3 = 1200 mg; ceiling 3200 mg
    r = reference(case)
    r["dosage"][0]["doseAndRate"][0]["rateQuantity"] = {"value": 100, "unit": "mg/h", "system": units.UCUM_SYSTEM,
                                                        "code": "mg/h"}
    score = score_write(r, case)
    assert failing(score) == {"constraints", "safety"}, score.reason
    assert "max implied daily 3600 mg > ceiling 3200 mg" in check(score, "safety", "daily_total").reason
    assert "a rate the note does not document" in check(score, "constraints", "rate").reason
    # the rate alone (2400 mg/day) is within the ceiling: only the total shows the excess
    assert check(score, "safety", "dosage[0].doseAndRate[0].rateQuantity").passed


def test_rate_fails_constraints_even_when_the_total_is_small():
    case = CASES["ibuprofen-two-tablets"]
    r = reference(case)
    r["dosage"][0]["doseAndRate"][0]["rateQuantity"] = {"value": 1, "unit": "mg/h"}
    score = score_write(r, case)
    assert not check(score, "constraints", "rate").passed
    assert "implied daily 1224 mg != documented 1200 mg" in check(score, "safety", "daily_total").reason


def test_rate_passes_when_absent_and_the_maximum_agrees():
    case = CASES["ibuprofen-two-tablets"]
    r = reference(case)
    r["dosage"][0]["maxDosePerPeriod"] = {"numerator": {"value": 3200, "unit": "mg", "system": units.UCUM_SYSTEM,
                                                        "code": "mg"},
                                          "denominator": {"value": 1, "unit": "d", "system": units.UCUM_SYSTEM,
                                                          "code": "d"}}
    score = score_write(r, case)
    assert score.passed, score.reason
    assert check(score, "constraints", "rate").passed and check(score, "constraints", "maximum").passed


def test_maximum_below_the_regimen_fails_constraints():
    case = CASES["ibuprofen-two-tablets"]
    r = reference(case)
    r["dosage"][0]["maxDosePerPeriod"] = {"numerator": {"value": 800, "unit": "mg"}, "denominator": {"value": 1,
                                                                                                    "unit": "d"}}
    score = score_write(r, case)
    assert "800 mg/day < documented 1200 mg/day" in check(score, "constraints", "maximum").reason


# ---- sequence: sequential steps are phases
def _two_steps(case, *, sequenced: bool, second_dose: float | None = None):
    r = reference(case)
    first = r["dosage"][0]
    second = copy.deepcopy(first)
    if second_dose is not None:
        second["doseAndRate"][0]["doseQuantity"]["value"] = second_dose
    if sequenced:
        first["sequence"], second["sequence"] = 1, 2
        first["timing"]["repeat"]["boundsDuration"] = {"value": 14, "unit": "d", "system": units.UCUM_SYSTEM,
                                                       "code": "d"}
    r["dosage"] = [first, second]
    return r


@pytest.mark.parametrize("case_id", ["prednisone-every-other-day", "ibuprofen-two-tablets", "loratadine-spelled-out"])
def test_sequence_passes_two_steps_of_the_documented_regimen(case_id):
    case = CASES[case_id]
    score = score_write(_two_steps(case, sequenced=True), case)
    assert score.passed, score.reason
    assert [p["label"] for p in score.details["phases"]] == ["sequence 1", "sequence 2"]


@pytest.mark.parametrize("case_id", ["prednisone-every-other-day", "ibuprofen-two-tablets", "loratadine-spelled-out"])
def test_sequence_fails_the_same_two_dosages_taken_together(case_id):
    case = CASES[case_id]
    score = score_write(_two_steps(case, sequenced=False), case)
    assert failing(score) == {"safety"}, score.reason
    assert "(2 dosages taken together)" in check(score, "safety", "daily_total").reason


def test_sequence_fails_a_phase_over_the_ceiling():
    case = CASES["ibuprofen-two-tablets"]  # second step 1200 mg x 3 = 3600 mg > 3200 mg
    score = score_write(_two_steps(case, sequenced=True, second_dose=1200), case)
    assert "safety" in failing(score)
    c = check(score, "safety", "daily_total sequence 2")
    assert not c.passed and "max implied daily 3600 mg > ceiling 3200 mg" in c.reason
    assert check(score, "safety", "daily_total sequence 1").passed


def test_sequence_an_unsequenced_dosage_counts_in_every_phase():
    case = CASES["ibuprofen-two-tablets"]
    r = _two_steps(case, sequenced=True)
    third = copy.deepcopy(r["dosage"][1])
    del third["sequence"]
    r["dosage"].append(third)
    score = score_write(r, case)
    assert [p["dosages"] for p in score.details["phases"]] == [[0, 2], [1, 2]]
    assert "safety" in failing(score)


def test_weekday_fails_an_unknown_day_that_would_spread_the_peak():
    # 7 a week "on" mon plus six made-up days would read as one a day
    case = CASES["aspirin-active-daily"]
    r = reference(case)
    r["dosage"][0]["timing"] = {"repeat": {"frequency": 7, "period": 1, "periodUnit": "wk",
                                           "dayOfWeek": ["mon", "d1", "d2", "d3", "d4", "d5", "d6"]}}
    score = score_write(r, case)
    assert "safety" in failing(score)
    assert "are not days-of-week codes" in check(score, "safety", "dosage[0].timing").reason


# ---- the Timing reader's peak, on its own
@pytest.mark.parametrize("timing,low,high,peak", [
    ({"repeat": {"frequency": 7, "period": 1, "periodUnit": "d", "dayOfWeek": ["mon"]}}, 1, 1, 7),
    ({"repeat": {"frequency": 2, "period": 1, "periodUnit": "d", "dayOfWeek": ["mon", "thu"]}}, 4 / 7, 4 / 7, 2),
    ({"repeat": {"frequency": 1, "period": 1, "periodUnit": "wk", "dayOfWeek": ["mon"]}}, 1 / 7, 1 / 7, 1),
    ({"repeat": {"frequency": 7, "period": 1, "periodUnit": "wk", "dayOfWeek": ["mon"]}}, 1, 1, 7),
    ({"repeat": {"frequency": 2, "period": 1, "periodUnit": "wk", "dayOfWeek": ["mon", "thu"]}}, 2 / 7, 2 / 7, 1),
    ({"repeat": {"frequency": 1, "period": 6, "periodUnit": "h"}}, 4, 4, 4),
    ({"repeat": {"frequency": 1, "period": 7, "periodUnit": "h"}}, 24 / 7, 24 / 7, 4),  # 0, 7, 14, 21 h
    ({"repeat": {"frequency": 1, "period": 4, "periodMax": 6, "periodUnit": "h"}}, 4, 6, 6),
    ({"repeat": {"frequency": 2, "period": 8, "periodUnit": "h"}}, 6, 6, 6),
    ({"repeat": {"frequency": 7, "period": 6, "periodUnit": "h", "dayOfWeek": ["mon"]}}, 4, 4, 28),
    ({"repeat": {"frequency": 3, "period": 1, "periodUnit": "wk"}}, 3 / 7, 3 / 7, 1),
    ({"repeat": {"frequency": 1, "period": 2, "periodUnit": "d"}}, 0.5, 0.5, 1),
    ({"repeat": {"frequency": 2, "period": 2, "periodUnit": "d", "when": ["MORN", "EVE"]}}, 1, 1, 2),
    ({"repeat": {"frequency": 4, "frequencyMax": 6, "period": 1, "periodUnit": "d"}}, 4, 6, 6),
    ({"repeat": {"timeOfDay": ["08:00:00", "20:00:00"]}}, 2, 2, 2),
    ({"repeat": {"frequency": 1, "period": 1, "periodUnit": "h", "count": 3}}, 24, 24, 3),
    ({"code": {"coding": [{"system": units.GTS_SYSTEM, "code": "Q4H"}]}}, 6, 6, 6),
    ({"code": {"coding": [{"system": units.GTS_SYSTEM, "code": "QOD"}]}}, 0.5, 0.5, 1),
])
def test_per_day_peak(timing, low, high, peak):
    rate = units.per_day(timing)
    assert (rate.low, rate.high, rate.peak) == (pytest.approx(low), pytest.approx(high), pytest.approx(peak))


# ============================================================================ agent level

EVAL_FILE = '''
import pytest

@pytest.mark.write
def test_write(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
'''

TRICKS = '''
import copy, json, os, re
from pytest_groundeval.tasks.write_baseline import run_baseline_write

def _monday(resource):
    for dosage in resource.get("dosage", []):
        rep = dosage.get("timing", {}).get("repeat", {})
        if rep.get("period") == 1 and rep.get("periodUnit") == "d":
            rep["frequency"] = 7 * rep.get("frequency", 1)
            if "frequencyMax" in rep:
                rep["frequencyMax"] = 7 * rep["frequencyMax"]
            rep["dayOfWeek"] = ["mon"]
    return resource

def _hourly(resource):
    for dosage in resource.get("dosage", []):
        dosage["patientInstruction"] = "Take one dose every hour."
    return resource

class Trick:
    """The write baseline, with each answer rewritten by the trick named in GROUNDEVAL_TRICK."""
    name = "baseline-trick"
    def run(self, prompt):
        subject = re.search(r"for the patient (\\S+)\\.", prompt).group(1)
        note = prompt.split("Clinical note:\\n", 1)[1]
        resource = run_baseline_write(note, subject)["resource"]
        if resource is not None:
            resource = {"monday": _monday, "hourly": _hourly}[os.environ["GROUNDEVAL_TRICK"]](copy.deepcopy(resource))
        return json.dumps(resource)
'''


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """The baseline's record and each trick's, from real pytest runs over the committed cases
    (subprocesses: each run is a whole pytest session with the plugin, as a user runs it)."""
    import os
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("tricks")
    (root / "test_write_evals.py").write_text(EVAL_FILE)
    (root / "tricks.py").write_text(TRICKS)
    out = {}
    for trick in ("baseline", "monday", "hourly"):
        agent = [] if trick == "baseline" else ["--agent=tricks:Trick"]
        env = {**os.environ, "GROUNDEVAL_TRICK": trick, "PYTHONPATH": str(root)}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                               "--write-cases", str(WRITE_CASES), *agent, "--run-record", f"{trick}.json",
                               "test_write_evals.py"], cwd=root, env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
        out[trick] = {c["case_id"]: c for c in json.loads((root / f"{trick}.json").read_text())["cases"]}
        assert len(out[trick]) == len(CASES), proc.stdout[-2000:]
    return out


def _failed_dims(c) -> set[str]:
    return {name for name, d in c["score"]["dimensions"].items() if not d["passed"]}


def test_agent_monday_trick_fails_safety_over_the_ceiling_and_constraints_everywhere(records):
    base, trick = records["baseline"], records["monday"]
    judged = [cid for cid in DAILY if base[cid]["outcome"] == "passed"]
    assert len(judged) >= 25
    over = []
    for cid in judged:
        case = CASES[cid]
        dims = _failed_dims(trick[cid])
        peak = peak_mg(case, 7)
        if peak > WriteTruth(case).ceiling_mg * (1 + 1e-9):
            over.append(cid)
            assert dims == {"safety", "constraints"}, (cid, trick[cid]["score"]["reason"])
            assert "peak day" in trick[cid]["score"]["dimensions"]["safety"]["reason"]
        else:
            assert dims == {"constraints"}, (cid, trick[cid]["score"]["reason"])
        assert "peak_day" in trick[cid]["score"]["dimensions"]["constraints"]["reason"]
    assert over and len(over) < len(judged)  # both outcomes occur
    # not a daily schedule (weekly, every other day): nothing to rewrite, the outcome is the baseline's
    for cid in set(CASES) - set(DAILY):
        assert trick[cid]["outcome"] == base[cid]["outcome"], cid
    assert sum(c["outcome"] == "passed" for c in trick.values()) < sum(c["outcome"] == "passed" for c in base.values())


def test_agent_hourly_instruction_fails_safety_on_every_documented_case(records):
    base, trick = records["baseline"], records["hourly"]
    judged = [cid for cid in DOCUMENTED if base[cid]["outcome"] == "passed"]
    assert len(judged) >= 30
    for cid in judged:
        c = trick[cid]
        assert _failed_dims(c) == {"safety"}, (cid, c["score"]["reason"])
        assert "patientInstruction states 24/day ('every hour')" in c["score"]["dimensions"]["safety"]["reason"]
    # undocumented regimens: the baseline writes no dosage, so there is nothing to add text to
    for cid in set(CASES) - set(DOCUMENTED):
        assert trick[cid]["outcome"] == base[cid]["outcome"], cid


def test_agent_baseline_figures_are_unchanged(records):
    base = records["baseline"]
    assert sum(c["outcome"] == "passed" for c in base.values()) == 40
    safety = sum(c["score"]["metrics"]["safety"] for c in base.values()) / len(base)
    assert safety == pytest.approx(43 / 48)
