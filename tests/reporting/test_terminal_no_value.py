"""Declared figures a run has no value for (the letter task's jury figures without
``--judge-model``) are named on one line by family, not printed as a dash each; every figure
that has a value keeps its own line."""

from __future__ import annotations

from conftest import FIXTURES

from pytest_groundeval.model import CaseResult, Completeness, RunRecord, RunUsage
from pytest_groundeval.reporting.terminal import terminal_lines
from pytest_groundeval.tasks.letter import LetterTask


def _record() -> RunRecord:
    task = LetterTask(FIXTURES / "reconciliation")
    cases = []
    for ref in task.discover()[:3]:
        case = task.load(ref)
        score = task.score(task.parse(task.baseline(case.inputs)), case)
        cases.append(CaseResult(case_id=ref.case_id, task="letter", outcome="passed" if score.passed else "failed",
                                score=score))
    return RunRecord(run_id="r", started_at="t0", finished_at="t1", git_sha=None, agent="baseline", model=None,
                     requested={"agent": "baseline", "model": None}, options={}, versions={},
                     summary={"letter": task.summary(cases)}, cases=cases,
                     completeness=Completeness(selected=3, deselected=0, recorded=3, subset=False, selection={},
                                               cut_short=False),
                     usage=RunUsage(input_tokens=0, output_tokens=0, cost_usd=0.0, cases_priced=0,
                                    cases_unpriced=0, prices_as_of="2025-01-01"))


def test_figures_without_a_value_are_one_line_by_family():
    rec = _record()
    summary = rec.summary["letter"]
    empty = [n for n, s in summary.specs.items() if s.kind != "count" and summary.value(n) is None]
    valued = [n for n, s in summary.specs.items() if s.kind != "count" and summary.value(n) is not None]
    assert "judge_score" in empty and "checks_passed" in valued
    lines = terminal_lines(rec)
    assert not [ln for ln in lines if ln.rstrip().endswith(" -")], lines  # no dash per figure
    no_value = [ln for ln in lines if ln.strip().startswith("no value:")]
    assert len(no_value) == 1, lines
    families = {n.split("_", 1)[0] for n in empty}
    for fam in families:
        members = [n for n in empty if n.split("_", 1)[0] == fam]
        assert (f"{fam}_* ({len(members)})" if len(members) > 1 else members[0]) in no_value[0]
    for name in valued:  # each figure with a value keeps its own line
        assert any(ln.split()[:1] == [name] for ln in lines), name
