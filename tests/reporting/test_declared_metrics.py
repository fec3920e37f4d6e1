"""Declared metrics (issue 17 item 1): a record says what each of its figures is
(``summary.<task>.specs``: ``model.MetricSpec``), and compare, the gate, the terminal summary
and the HTML report read kinds and direction from it alone.

The records here are of a task ``toy`` that is not installed (no module, no entry point),
written by hand from typed results, so nothing can be looked up from a task class:

* ``accuracy``: a rate (pass/fail per case): exact McNemar;
* ``closeness``: a mean whose per-case values happen to be all 0 or 1: still the mean's paired
  bootstrap, never McNemar (the kind is declared, not guessed from the data);
* ``harm``: a rate declared lower-is-better: a threshold on it is a maximum, and more harm in
  NEW is the regression;
* ``hits`` / ``misses``: counts, and ``recall`` a prf figure of them (alias ``r``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_groundeval.model import (CaseResult, Completeness, MetricSpec, RunRecord, RunUsage, TaskSummary,
                                     UnscoredCounts, metric)
from pytest_groundeval.reporting import compare, html
from pytest_groundeval.reporting.gate import parse_threshold, run_gate
from pytest_groundeval.reporting.terminal import terminal_lines
from pytest_groundeval.scorers.base import prf, wilson_ci

N = 40
SPECS: list[MetricSpec] = [
    metric("accuracy", "rate"),
    metric("closeness", "mean", interval="none"),
    metric("harm", "rate", higher_is_better=False),
    MetricSpec(name="recall", kind="prf", counts=["hits", "fp", "misses"], figure="recall", aliases=["r"]),
    metric("hits", "count"), metric("fp", "count"),
    metric("misses", "count", unscored=UnscoredCounts(at_least=1)),
]


def _case(i: int, *, ok: bool, close: float, harm: bool, error: bool = False) -> CaseResult:
    base = {"case_id": f"c{i:02d}", "task": "toy", "content_hash": f"h{i}", "ground_truth": ["x"]}
    if error:
        return CaseResult(**base, outcome="error", error={"kind": "agent", "message": "boom"})
    metrics = {"accuracy": float(ok), "closeness": close, "harm": float(harm),
               "hits": 1.0 if ok else 0.0, "fp": 0.0, "misses": 0.0 if ok else 1.0}
    return CaseResult(**base, outcome="passed" if ok else "failed",
                      score={"passed": ok, "metrics": metrics, "reason": "right" if ok else "wrong"})


def _summary(cases: list[CaseResult]) -> TaskSummary:
    """The toy's figures computed here, as its (absent) task would."""
    n = len(cases)
    acc = [c.metric("accuracy") for c in cases]
    harm = [c.metric("harm") for c in cases]
    hits = sum(c.metric("hits") for c in cases)
    misses = sum(c.metric("misses") if c.score is not None else 1 for c in cases)
    figures = {
        "n_cases": n, "n_passed": sum(c.outcome == "passed" for c in cases),
        "n_failed": sum(c.outcome == "failed" for c in cases), "n_errors": sum(c.outcome == "error" for c in cases),
        "n_skipped": 0,
        "accuracy": round(sum(acc) / n, 6), "accuracy_ci95": wilson_ci(int(sum(acc)), n),
        "closeness": round(sum(c.metric("closeness") for c in cases) / n, 6),
        "harm": round(sum(harm) / n, 6), "harm_ci95": wilson_ci(int(sum(harm)), n),
        "recall": round(prf(int(hits), 0, int(misses))[1], 6),
        "hits": int(hits), "fp": 0, "misses": int(misses),
    }
    return TaskSummary.build(figures, SPECS)


def _record(cases: list[CaseResult], run_id: str) -> RunRecord:
    return RunRecord(
        run_id=run_id, started_at="t0", finished_at="t1", git_sha=None, agent="scripted", model=None,
        requested={"agent": "scripted", "model": None}, options={}, versions={}, summary={"toy": _summary(cases)},
        cases=cases, completeness=Completeness(selected=len(cases), deselected=0, recorded=len(cases), subset=False,
                                               selection={}, cut_short=False),
        usage=RunUsage(input_tokens=0, output_tokens=0, cost_usd=0.0, cases_priced=0, cases_unpriced=0,
                       prices_as_of="2025-01-01"))


def _write(path: Path, rec: RunRecord) -> Path:
    path.write_text(json.dumps(rec.model_dump(mode="json")))
    return path


@pytest.fixture
def toy(tmp_path):
    """BASE: every case right, close (1.0), harmless. NEW: 12 cases wrong (accuracy), 12 not
    close (closeness drops to 0 on them: per-case values 0 and 1 only), 12 harmful; one errored."""
    from pytest_groundeval.tasks import registry

    assert "toy" not in registry()  # nothing to look the task up in
    base = [_case(i, ok=True, close=1.0, harm=False) for i in range(N)]
    new = [_case(i, ok=i >= 12, close=0.0 if i % 3 == 0 else 1.0, harm=i < 12) for i in range(N - 1)]
    new.append(_case(N - 1, ok=False, close=0.0, harm=False, error=True))
    return {"base": _write(tmp_path / "base.json", _record(base, "b")),
            "new": _write(tmp_path / "new.json", _record(new, "n")), "tmp": tmp_path}


def _compare(capsys, *args: str) -> tuple[int, dict]:
    code = compare.main([*map(str, args), "--format", "json"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return code, json.loads(out)


def _rows(data: dict) -> dict[str, dict]:
    (task,) = data["tasks"]
    assert task["task"] == "toy"
    return {m["metric"]: m for m in task["metrics"]}


def test_a_record_of_a_task_not_installed_compares_by_its_declared_kinds(toy, capsys):
    code, data = _compare(capsys, toy["base"], toy["new"], "--fail-on-regression")
    rows = _rows(data)
    assert list(rows) == ["pass", "accuracy", "closeness", "harm", "recall"]  # counts are parts, not compared
    assert rows["accuracy"]["test"] == "mcnemar" and rows["accuracy"]["discordant"] == {"b": 13, "c": 0}
    # a mean whose per-case values are all 0 or 1 still gets the mean's test
    assert rows["closeness"]["test"] == "bootstrap" and rows["closeness"]["discordant"] is None
    assert rows["closeness"]["new"] == pytest.approx(1 - 14 / N) and rows["closeness"]["regression"]
    # a prf figure from the summed counts, the errored case's miss as its count's spec says
    assert rows["recall"]["test"] == "bootstrap" and rows["recall"]["new"] == pytest.approx(27 / 40)
    assert not task_notes(data)  # every figure recomputed from its spec is the record's own
    # harm went up: lower is better, so that is the regression (not an improvement)
    assert rows["harm"]["delta"] == pytest.approx(12 / N) and rows["harm"]["regression"]
    assert not rows["harm"]["improvement"] and rows["harm"]["test"] == "mcnemar"
    assert code == 1 and "toy.harm" in {r["label"] for r in data["regressions"]}
    # the other way round, less harm is an improvement and no regression
    _, back = _compare(capsys, toy["new"], toy["base"])
    assert _rows(back)["harm"]["improvement"] and not _rows(back)["harm"]["regression"]
    # --metric resolves against the records' own declarations (an alias too)
    _, only = _compare(capsys, toy["base"], toy["new"], "--metric", "toy.r", "--metric", "toy.harm")
    assert list(_rows(only)) == ["harm", "recall"]
    assert compare.main([str(toy["base"]), str(toy["new"]), "--metric", "toy.hits"]) == 2  # a count: no
    assert "not a metric these runs declare for toy" in capsys.readouterr().err


def task_notes(data: dict) -> list[str]:
    return [n for t in data["tasks"] for n in t["notes"]]


def test_a_record_of_a_task_not_installed_gates_in_the_declared_direction(toy):
    rec = RunRecord.model_validate_json(toy["new"].read_text())
    harm = rec.summary["toy"].value("harm")
    assert harm == pytest.approx(12 / N)
    thresholds = [parse_threshold(t, rec.summary) for t in ("toy.harm=0.1", "toy.r=0.5", "toy.accuracy=0.9")]
    assert [t.key for t in thresholds] == ["harm", "recall", "accuracy"]
    gate = run_gate(thresholds, rec.summary, rec.completeness)
    assert [c.passed for c in gate.thresholds] == [False, True, False] and not gate.passed
    # lower is better: a harm under its maximum is met, whatever a minimum would say
    assert run_gate([parse_threshold("toy.harm=0.5", rec.summary)], rec.summary, rec.completeness).passed
    with pytest.raises(ValueError, match="unknown metric 'hits'"):  # counts are never thresholds
        parse_threshold("toy.hits=0.5", rec.summary)
    # the terminal summary: the toy's figures, and the missed maximum said as one
    lines = terminal_lines(rec.model_copy(update={"gate": gate}))
    assert "toy: 40 cases, 27 passed, 12 failed, 1 error" in lines
    assert any(line.split()[:2] == ["closeness", "0.650"] for line in lines), lines
    assert not any(line.split()[:1] == ["hits"] for line in lines)  # a count is a part, not a figure
    assert "groundeval gate: MISSED toy.harm = 0.300 > threshold 0.1" in lines
    assert "groundeval gate: MISSED toy.accuracy = 0.675 < threshold 0.9" in lines


def test_a_judged_figure_is_gated_with_its_unscored_shares_from_the_record_alone():
    """A spec ``guarded_by`` shares of unscored items (the jury's judge_score: the overall share,
    then each item's): a threshold on it also requires each share at most 10 %, or the limit the
    user gave the overall share; a share with a threshold of its own is checked once, as the
    user's; an ini threshold's guards follow it (not applied when its task did not run)."""
    from pytest_groundeval.reporting.gate import UNSCORED_LIMIT, Threshold, evaluate_gate

    specs = [metric("score", "mean", guarded_by=["unscored", "unscored_harm"]),
             metric("unscored", "custom", higher_is_better=False),
             metric("unscored_harm", "custom", higher_is_better=False)]
    base = {"n_cases": 10, "n_passed": 10, "n_failed": 0, "n_errors": 0, "n_skipped": 0, "score": 1.0}

    def gate(unscored, harm, *texts, origin="option"):
        summary = {"toy": TaskSummary.build({**base, "unscored": unscored, "unscored_harm": harm}, specs)}
        return evaluate_gate([parse_threshold(t, summary, origin) for t in ("toy.score=0.9", *texts)], summary)

    missed = gate(0.11, 0.11)
    assert not missed.passed and [c.metric for c in missed.thresholds] == ["toy.score", "toy.unscored",
                                                                           "toy.unscored_harm"]
    assert missed.thresholds[0].passed and missed.thresholds[1].threshold == UNSCORED_LIMIT == 0.1
    assert "are unscored (no verdict" in missed.thresholds[1].reason
    assert gate(0.10, 0.10).passed  # at the limit
    # the harm item alone left unscored: the overall share is low, the item's is not
    assert not gate(0.05, 0.2).passed and gate(0.05, 0.2).thresholds[2].reason.startswith("20.0% of the judged items it counts")
    assert gate(0.5, 0.5, "toy.unscored=0.5").passed  # the user's limit on the overall share, for every share
    assert len(gate(0.5, 0.5, "toy.unscored=0.5").thresholds) == 3
    assert not gate(0.5, 0.6, "toy.unscored=0.5").passed
    assert gate(0.05, 0.6, "toy.unscored_harm=0.6").passed  # the user's own limit on one share
    assert not gate(0.5, 0.5, "toy.unscored=0.4").passed
    assert not gate(0.11, 0.0, origin="ini").passed  # the project's config is gated the same way
    elsewhere = evaluate_gate([Threshold("toy", "score", "score", 0.9, origin="ini")], {})
    assert elsewhere is None  # no toy case ran: neither the threshold nor its guards apply


def test_a_record_of_a_task_not_installed_is_reported(toy, capsys):
    page = toy["tmp"] / "toy.html"
    assert html.run(html_args([toy["new"]], page)) == 0
    text = page.read_text()
    summary = json.loads(toy["new"].read_text())["summary"]["toy"]
    for name in ("accuracy", "closeness", "harm", "recall", "hits", "misses"):
        assert f'data-metric="toy.{name}">{html.num(summary[name])}<' in text, name
    assert 'data-metric="toy.harm_ci95">' + html.interval(summary["harm_ci95"]) in text
    assert 'data-kind="mean"><td>closeness' in text
    diff = toy["tmp"] / "diff.html"
    assert html.run(html_args([toy["base"], toy["new"]], diff)) == 0
    assert 'data-compare="toy.harm"' in diff.read_text() and 'data-compare="toy.specs"' not in diff.read_text()


def html_args(runs: list[Path], out: Path):
    import argparse

    return argparse.Namespace(runs=runs, output=out)


def test_a_record_without_specs_is_refused_naming_the_file_and_what_to_do(toy, capsys):
    """A record written before records declared their metrics: refused, not read by guessing."""
    old = json.loads(toy["base"].read_text())
    del old["summary"]["toy"]["specs"]
    path = toy["tmp"] / "old.json"
    path.write_text(json.dumps(old))
    assert compare.main([str(path), str(toy["new"])]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "declared their metrics" in err and f"--rescore {path}" in err
    assert html.run(html_args([path], toy["tmp"] / "old.html")) == 2
    err = capsys.readouterr().err
    assert str(path) in err and f"--rescore {path}" in err
    with pytest.raises(ValueError, match="specs"):
        RunRecord.model_validate(old)


def test_a_summary_holds_only_declared_figures():
    rec = json.loads(_record([_case(0, ok=True, close=1.0, harm=False)], "r").model_dump_json())
    toy = rec["summary"]["toy"]
    assert list(toy)[-1] == "specs" and toy["specs"]["harm"]["higher_is_better"] is False
    assert "counts" not in toy["specs"]["accuracy"]  # unset options are left out of the record
    with pytest.raises(ValueError, match="no spec declares: surprise"):
        RunRecord.model_validate({**rec, "summary": {"toy": {**toy, "surprise": 1.0}}})
    with pytest.raises(ValueError, match="without a figure: closeness"):
        RunRecord.model_validate({**rec, "summary": {"toy": {k: v for k, v in toy.items() if k != "closeness"}}})
    with pytest.raises(ValueError, match="prf figure names its three counts"):
        MetricSpec(name="f", kind="prf")


def test_a_journal_compares_by_its_specs_lines_and_one_without_is_refused(toy, capsys):
    """A journal has no summary: a ``specs`` line before a task's first case declares its
    figures (as the reporter writes it); a journal without one is refused, naming it and what
    to do."""
    new = RunRecord.model_validate_json(toy["new"].read_text())
    specs = [s.model_dump(mode="json") for s in new.summary["toy"].specs.values()]
    lines = [json.dumps({"kind": "case", **c.model_dump(mode="json")}) for c in new.cases]
    journal = toy["tmp"] / "new.jsonl"
    journal.write_text("\n".join([json.dumps({"kind": "header", "schema_version": "2.0", "run_id": "n"}),
                                  json.dumps({"kind": "specs", "task": "toy", "specs": specs})] + lines) + "\n")
    _, data = _compare(capsys, toy["base"], journal)
    rows = _rows(data)
    assert rows["closeness"]["test"] == "bootstrap" and rows["harm"]["regression"]
    assert rows["recall"]["new"] == pytest.approx(27 / 40)
    journal.write_text("\n".join([json.dumps({"kind": "header", "schema_version": "2.0", "run_id": "n"})] + lines))
    assert compare.main([str(toy["base"]), str(journal)]) == 2
    err = capsys.readouterr().err
    assert str(journal) in err and "declared their metrics" in err and f"--resume {journal}" in err


def test_a_custom_figure_is_compared_as_recorded_without_a_test(toy, capsys):
    """A figure only its task's code computes (kind custom): base and new as the records hold
    them, no paired test, and a note saying why."""
    paths = []
    for name, value in (("base", 0.8), ("new", 0.6)):
        data = json.loads(toy[name].read_text())
        data["summary"]["toy"]["judged"] = value
        data["summary"]["toy"]["specs"]["judged"] = {"name": "judged", "kind": "custom"}
        paths.append(_write(toy["tmp"] / f"{name}-custom.json", RunRecord.model_validate(data)))
    _, data = _compare(capsys, *paths)
    row = _rows(data)["judged"]
    assert (row["base"], row["new"], row["delta"], row["test"], row["p_value"]) == (0.8, 0.6, -0.2, None, None)
    assert not row["regression"]
    assert any("judged is a custom figure" in n for n in task_notes(data))


def test_runs_with_different_task_settings_are_named_not_their_case_folders(toy, capsys):
    """A task run with another jury (any setting the task records but where its cases were
    read from) measures another set-up: compare names the difference."""
    paths = []
    for name, judges, folder in (("base", ["judge-a"], "/ci/a"), ("new", ["judge-a", "judge-b"], "/ci/b")):
        rec = RunRecord.model_validate_json(toy[name].read_text())
        rec = RunRecord.model_validate({**rec.model_dump(mode="json"),
                                        "options": {"toy": {"toy_cases": folder, "judges": judges}}})
        paths.append(_write(toy["tmp"] / f"{name}-judged.json", rec))
    _, data = _compare(capsys, *paths)
    differ = [w for w in data["warnings"] if "the runs differ in" in w]
    assert differ == ["toy: the runs differ in judges: BASE ['judge-a'], NEW ['judge-a', 'judge-b'] "
                      "(the figures measure different set-ups)"]
    _, same = _compare(capsys, toy["base"], toy["new"])
    assert not [w for w in same["warnings"] if "the runs differ in" in w]
