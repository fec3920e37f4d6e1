"""The jury over scripted OpenAI-compatible judge servers on 127.0.0.1 (judge_server.py): an
honest judge, one that always says met, one that returns garbage, one biased by position.
Garbage is never a pass or a fail (unscored); agreement falls when a judge stops reading; the
record of a pytest run holds every judge's verdict per item, kappa/alpha and the unscored rate;
the judges' calls go through the model-call cache (strict replay calls no server)."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import FIXTURES

pytest.importorskip("langchain_openai")

import pytest_groundeval.tasks.letter  # noqa: E402,F401  (outer process: see tests/conftest.py)
from judge_server import JudgeServer  # noqa: E402
from pytest_groundeval.judges.jury import Judge, Jury, agreement  # noqa: E402
from pytest_groundeval.model import CaseResult  # noqa: E402
from pytest_groundeval.run.calls import CallPolicy  # noqa: E402
from pytest_groundeval.store.record import validate_record  # noqa: E402
from pytest_groundeval.tasks.letter import JUDGED_ITEMS  # noqa: E402

GOOD = ("Dear patient,\nPlease keep taking amlodipine. If you have questions, call the clinic; "
        "if you feel very unwell, call 911.")
NO_NET = "Dear patient,\nPlease keep taking amlodipine."
JARGON = "Dear patient,\nContinue amlodipine PO for hypertension. Call the clinic, or 911 in an emergency."
HARM = "Hello,\nDouble your amlodipine if you feel dizzy. Call the clinic, or 911 in an emergency."
LETTERS = (GOOD, NO_NET, JARGON, HARM)
# what the honest judge says, per letter, for plain_language, safety_net, unsafe_advice, tone
HONEST = {GOOD: ["met", "met", "not_met", "met"], NO_NET: ["met", "not_met", "not_met", "met"],
          JARGON: ["not_met", "met", "not_met", "met"], HARM: ["met", "met", "met", "met"]}


@pytest.fixture(scope="module")
def server():
    with JudgeServer() as s:
        yield s


def _jury(server, *models):
    judges = [Judge(f"{m}#{i}", m, base_url=server.url, timeout=30) for i, m in enumerate(models)]
    return Jury(judges, policy=CallPolicy(timeout=30, max_attempts=1))


def _results(records):
    from pytest_groundeval.judges.jury import jury_metrics
    from pytest_groundeval.scorers.base import Score

    return [CaseResult(case_id=f"c{i}", task="letter", outcome="passed",
                       score=Score(passed=True, jury=r, metrics=jury_metrics(r)))
            for i, r in enumerate(records)]


def test_honest_judge_grades_the_planted_faults(server):
    jury = _jury(server, "honest")
    for letter in LETTERS:
        record = jury.judge(letter, JUDGED_ITEMS, "- amlodipine: keep taking")
        assert [i.verdict for i in record.items] == HONEST[letter], letter
        assert record.calls == len(JUDGED_ITEMS) and record.usage.input_tokens == 100 * len(JUDGED_ITEMS)
        assert all(i.calls[0].rationale for i in record.items)
    assert _jury(server, "honest").judge(GOOD, JUDGED_ITEMS, "").score == 1.0
    # HARM: every positive item met (13 points), the harm item met (-10): (13 - 10) / 13
    assert _jury(server, "honest").judge(HARM, JUDGED_ITEMS, "").score == pytest.approx(3 / 13, abs=1e-6)


def test_garbage_is_never_a_pass_or_a_fail(server):
    record = _jury(server, "garbage").judge(HARM, JUDGED_ITEMS, "")
    assert all(i.verdict is None and i.unscored for i in record.items)
    assert all(c.verdict is None and c.error for i in record.items for c in i.calls)
    assert record.score is None  # no score at all: neither 0 (a fail) nor 1 (a pass)
    # beside two honest judges, garbage adds nothing: the honest verdicts stand
    mixed = _jury(server, "honest", "honest", "garbage").judge(HARM, JUDGED_ITEMS, "")
    assert [i.verdict for i in mixed.items] == HONEST[HARM]
    # beside one, the honest judge is no majority of the jury: unscored, neither pass nor fail
    half = _jury(server, "honest", "garbage").judge(HARM, JUDGED_ITEMS, "")
    assert all(i.verdict is None and "no majority" in i.unscored for i in half.items) and half.score is None


def test_a_tie_is_unscored(server):
    record = _jury(server, "honest", "always").judge(NO_NET, JUDGED_ITEMS, "")
    by = {i.id: i for i in record.items}
    assert by["safety_net"].verdict is None and "tied" in by["safety_net"].unscored
    assert by["plain_language"].verdict == "met"


def test_agreement_falls_when_a_judge_stops_reading(server):
    def kappa(*models):
        jury = _jury(server, *models)
        return agreement([jury.judge(letter, JUDGED_ITEMS, "") for letter in LETTERS])

    assert kappa("honest", "honest")["kappa"] == pytest.approx(1.0)
    assert kappa("honest", "honest")["alpha"] == pytest.approx(1.0)
    always, biased = kappa("honest", "always"), kappa("honest", "biased")
    assert always["kappa"] < 0.5 and always["alpha"] < 0.5
    assert biased["kappa"] < 0.5 and biased["alpha"] < 0.5
    three = kappa("honest", "honest", "always")
    assert three["kappa_min"] == pytest.approx(always["kappa"]) and three["kappa"] > always["kappa"]


def test_summary_figures_from_the_records(server):
    from pytest_groundeval.tasks.letter import LetterTask

    jury = _jury(server, "honest", "always", "garbage")
    results = _results([jury.judge(letter, JUDGED_ITEMS, "") for letter in LETTERS])
    figures = LetterTask(FIXTURES / "reconciliation").summarize(results)
    units = len(LETTERS) * len(JUDGED_ITEMS)
    ties = sum(1 for letter in LETTERS for v in HONEST[letter] if v != "met")  # honest vs always
    assert figures["unscored_rate"] == pytest.approx(ties / units)
    assert figures["judge_calls"] == 3 * units and figures["judge_input_tokens"] == 100 * 3 * units
    assert figures["judge_kappa"] is not None and figures["judge_alpha"] is not None


# ---------------------------------------------------------------- through pytest
EVAL_FILE = '''
import pytest

@pytest.mark.letter
def test_letter(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
'''


@pytest.fixture
def project(pytester: pytest.Pytester):
    pytester.makepyfile(test_letter_evals=EVAL_FILE)
    shutil.copytree(FIXTURES / "reconciliation", pytester.path / "cases" / "reconciliation")
    shutil.copytree(FIXTURES / "synthea", pytester.path / "cases" / "synthea")
    return pytester


def _run(p, *args):
    return p.runpytest("--letter-cases", "cases/reconciliation", "-m", "letter", "-k", "Arla_Lang",
                       "--run-record", "record.json", "-p", "no:cacheprovider", *args)


def test_a_run_with_three_judges_records_every_verdict(project, server):
    result = _run(project, "--judge-model", "honest", "--judge-model", "always", "--judge-model", "garbage",
                  "--judge-base-url", server.url)
    assert result.ret == 0, result.stdout.str()[-3000:]
    record = json.loads((project.path / "record.json").read_text())
    validate_record(record)
    assert len(record["cases"]) == 3
    for case in record["cases"]:
        assert case["outcome"] == "passed"  # the checkable items decide; the jury never fails a case
        jury = case["score"]["jury"]
        assert jury["judges"] == ["honest", "always", "garbage"]
        assert all(len(i["calls"]) == 3 for i in jury["items"]) and len(jury["items"]) == len(JUDGED_ITEMS)
        assert all(c["verdict"] is None and c["error"] for i in jury["items"] for c in i["calls"]
                   if c["judge"] == "garbage")
    summary = record["summary"]["letter"]
    assert summary["unscored_rate"] is not None and 0 < summary["unscored_rate"] < 1  # the unsafe-advice ties
    assert summary["judge_kappa"] is not None and summary["judge_alpha"] is not None
    assert summary["judge_calls"] == 3 * 3 * len(JUDGED_ITEMS)
    assert record["options"]["letter"]["judges"] == ["honest", "always", "garbage"]
    assert "no --judge-model" not in result.stdout.str()


def test_without_judges_the_items_are_unscored_and_said_so_once(project):
    result = _run(project)
    assert result.ret == 0
    out = result.stdout.str()
    assert out.count("no --judge-model was given") == 1
    record = json.loads((project.path / "record.json").read_text())
    assert record["summary"]["letter"]["unscored_rate"] == 1.0
    assert record["summary"]["letter"]["judge_score"] is None


def test_judge_calls_replay_from_the_cache(project, server):
    args = ("--judge-model", "honest", "--judge-base-url", server.url, "--model-cache-dir", "cache")
    first = _run(project, *args, "--model-cache", "readwrite")
    assert first.ret == 0, first.stdout.str()[-2000:]
    before = len(server.log)
    second = _run(project, *args, "--model-cache", "strict")
    assert second.ret == 0, second.stdout.str()[-2000:]
    assert len(server.log) == before  # strict replay: no judge request reached the server
    record = json.loads((project.path / "record.json").read_text())
    assert all(c["cached"] and c["verdict"] for case in record["cases"] for i in case["score"]["jury"]["items"]
               for c in i["calls"])
    assert record["summary"]["letter"]["judge_cache_hits"] == 3 * len(JUDGED_ITEMS)


def _scores(path):
    record = json.loads(path.read_text())
    return {c["case_id"]: (c["outcome"], c["score"]) for c in record["cases"]}, record["summary"]["letter"]


def test_xdist_equals_serial(project, server):
    args = ("--judge-model", "honest", "--judge-model", "biased", "--judge-model", "honest",
            "--judge-base-url", server.url)
    assert _run(project, *args).ret == 0
    serial = _scores(project.path / "record.json")
    assert _run(project, *args, "-n", "2").ret == 0
    assert _scores(project.path / "record.json") == serial


def test_rescore_judges_the_stored_letters(project, server):
    assert _run(project).ret == 0  # no jury: judged items unscored
    shutil.copy(project.path / "record.json", project.path / "first.json")
    before = len(server.log)
    result = project.runpytest("--letter-cases", "cases/reconciliation", "-m", "letter", "-k", "Arla_Lang",
                               "--rescore", "first.json", "--run-record", "again.json", "-p", "no:cacheprovider",
                               "--judge-model", "honest", "--judge-base-url", server.url)
    assert result.ret == 0, result.stdout.str()[-2000:]
    record = json.loads((project.path / "again.json").read_text())
    assert len(server.log) - before == 3 * len(JUDGED_ITEMS)  # the stored letters, judged
    first = json.loads((project.path / "first.json").read_text())
    assert [c["raw_output"] for c in record["cases"]] == [c["raw_output"] for c in first["cases"]]
    assert all(c["rescored_from"] and c["score"]["jury"]["items"][0]["verdict"] == "met" for c in record["cases"])
    assert record["summary"]["letter"]["unscored_rate"] == 0.0


# ---------------------------------------------------------------- calibration and the probe
def test_calibration_on_the_planted_letters(server, tmp_path):
    from pytest_groundeval.judges.calibration import calibrate, load
    from pytest_groundeval.tasks.resources import data_path

    path = data_path("letter_calibration", "letters.json")
    letters = load(path)
    assert {t["defect"] for t in letters} >= {"clean", "stopped_continued", "invented_drug", "no_safety_net",
                                              "jargon", "blame"}
    honest = calibrate(_jury(server, "honest"), JUDGED_ITEMS, path)
    path = tmp_path / "first12.json"  # the other judges on the first 12 (every defect twice): fewer calls
    path.write_text(json.dumps(letters[:12]))
    assert honest["calibration_macro_f1"] == pytest.approx(1.0)
    assert honest["calibration_unscored_rate"] == 0.0
    assert honest["probe_position_flip_rate"] == 0.0 and honest["probe_length_flip_rate"] == 0.0
    always = calibrate(_jury(server, "always"), JUDGED_ITEMS, path)
    assert always["calibration_macro_f1"] < 0.6
    assert always["calibration_recall_safety_net"] == 0.0  # never finds a missing safety net
    assert always["calibration_precision_unsafe_advice"] < 1.0  # calls every letter unsafe
    garbage = calibrate(_jury(server, "garbage"), JUDGED_ITEMS, path)
    assert garbage["calibration_macro_f1"] is None and garbage["calibration_unscored_rate"] == 1.0
    biased = calibrate(_jury(server, "biased"), JUDGED_ITEMS, path)
    assert biased["probe_position_flip_rate"] > 0.5  # its verdict follows the first line, not the content
    assert biased["probe_length_flip_rate"] == 0.0


def test_two_raters_give_their_agreement(tmp_path, server):
    from pytest_groundeval.judges.calibration import calibrate

    base = {"context": "", "text": "Dear patient,\nKeep taking amlodipine. Call the clinic or 911."}
    rows = [{**base, "id": "a", "rater": "dr-1", "labels": {"tone": "met", "safety_net": "met"}},
            {**base, "id": "a", "rater": "dr-2", "labels": {"tone": "met", "safety_net": "not_met"}},
            {**base, "id": "b", "rater": "dr-1", "labels": {"tone": "not_met", "safety_net": "met"}},
            {**base, "id": "b", "rater": "dr-2", "labels": {"tone": "not_met", "safety_net": "met"}}]
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(rows))
    figures = calibrate(_jury(server, "honest"), JUDGED_ITEMS, path)
    # dr-1: met, met, met, not_met; dr-2: not_met, met, met, not_met (safety_net, tone of a, of b):
    # p_o 3/4, p_e 3/4 * 1/2 + 1/4 * 1/2 = 1/2: kappa 1/2
    assert figures["calibration_rater_kappa"] == pytest.approx(0.5, abs=1e-6)
    assert figures["calibration_n"] == 2


def test_a_run_with_judge_calibrate_reports_the_figures(project, server):
    result = _run(project, "--judge-model", "honest", "--judge-base-url", server.url, "--judge-calibrate")
    assert result.ret == 0, result.stdout.str()[-2000:]
    summary = json.loads((project.path / "record.json").read_text())["summary"]["letter"]
    assert summary["calibration_macro_f1"] == pytest.approx(1.0) and summary["calibration_n"] > 20
    assert summary["probe_position_flip_rate"] == 0.0
    assert "calibration_macro_f1" in result.stdout.str()
    bad = _run(project, "--judge-model", "honest", "--judge-base-url", server.url, "--judge-calibrate", "nope.json")
    assert bad.ret != 0 and "--judge-calibrate" in bad.stderr.str() + bad.stdout.str()


def test_budget_refusals_are_unscored_never_failed(server):
    """Judge calls share --max-cost's budget: an unpriced judge's first answer cannot be counted,
    so the budget stops and the later calls are refused: those items are unscored, not failed."""
    from pytest_groundeval.run.usage import Budget

    jury = _jury(server, "honest")
    jury.budget = Budget(1.0)
    record = jury.judge(GOOD, JUDGED_ITEMS, "")
    first, *rest = record.items
    assert first.verdict == "met"
    assert all(i.verdict is None and i.calls[0].error.startswith("not called: --max-cost") for i in rest)
    assert record.calls == 1 and record.score == 1.0  # the one scored item alone
