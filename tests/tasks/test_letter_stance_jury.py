"""An unclear stance with a jury (tasks/letter.py): the task adds a per-drug stance item (no
points) for each drug the reader left unclear; the jury's verdict on it decides that drug's
``stance`` check (met passes, not met or unscored fails) and the summary reports the jury's
agreement on these items. Without a jury the same letter fails (tests/scorers/
test_letter_unclear_unsafe.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scorers"))
from test_letter_scorer import GOOD, TRUTH  # noqa: E402

from pytest_groundeval.judges.jury import Judge, Jury  # noqa: E402
from pytest_groundeval.model import Case, CaseRef, CaseResult  # noqa: E402
from pytest_groundeval.tasks.letter import JUDGED_ITEMS, LetterTask, stance_items  # noqa: E402

pytest.importorskip("langchain_core")

UNCLEAR = GOOD.replace("Stop taking galantamine: your record shows it was stopped.",
                       "Whether you take galantamine is up to you.")


class Scripted:
    """A chat model that answers the stance item with ``stance`` and every other item met."""

    def __init__(self, stance: str | None) -> None:
        self.stance = stance
        self.asked: list[str] = []

    def invoke(self, messages):
        from langchain_core.messages import AIMessage

        prompt = messages[-1].content
        self.asked.append(prompt)
        if "clearly tell the patient to" in prompt:
            if self.stance is None:
                return AIMessage(content="I cannot grade this.")
            return AIMessage(content=json.dumps({"verdict": self.stance, "rationale": "x"}))
        verdict = "not_met" if "harm the patient" in prompt else "met"
        return AIMessage(content=json.dumps({"verdict": verdict, "rationale": "x"}))


def scored(letter: str, *stances: str | None):
    task = LetterTask(FIXTURES / "reconciliation")
    task.jury = Jury([Judge(f"j{i}", Scripted(s)) for i, s in enumerate(stances)])
    case = Case(ref=CaseRef(task="letter", case_id="t", path=Path("t.json")), prompt="", inputs={}, truth=TRUTH,
                content_hash="x")
    return task, task.score(letter, case)


def test_the_task_asks_a_stance_item_only_for_an_unclear_drug():
    assert [i.id for i in stance_items(UNCLEAR, TRUTH)] == ["stance_310436"]
    assert stance_items(GOOD, TRUTH) == ()
    assert all(i.points == 0 for i in stance_items(UNCLEAR, TRUTH))


@pytest.mark.parametrize("stances, passes", [(("met", "met"), True), (("not_met", "not_met"), False),
                                             (("met", "not_met"), False), ((None, None), False)])
def test_the_jury_decides_an_unclear_stance(stances, passes):
    task, score = scored(UNCLEAR, *stances)
    stance = score.dimensions["stance"]
    assert stance.passed is passes, stance.reason
    assert score.passed is passes
    assert score.metrics["unclear_stances"] == 1.0
    assert [i.id for i in score.jury.items] == [i.id for i in JUDGED_ITEMS] + ["stance_310436"]
    # the stance item has no points: the judge score is the four judged items' alone
    assert score.jury.score == 1.0


def test_a_clear_letter_asks_no_stance_item():
    _, score = scored(GOOD, "met", "met")
    assert score.passed and [i.id for i in score.jury.items] == [i.id for i in JUDGED_ITEMS]


def test_the_summary_reports_the_stance_items_and_their_agreement():
    task, agreeing = scored(UNCLEAR, "met", "met")
    _, split = scored(UNCLEAR, "not_met", "not_met")
    results = [CaseResult(case_id=f"c{i}", task="letter", outcome="passed" if s.passed else "failed", score=s)
               for i, s in enumerate((agreeing, split))]
    summary = task.summarize(results)
    assert summary["stance_items"] == 2 and summary["stance_items_met"] == 1
    assert summary["stance_judge_kappa"] == 1.0  # both judges agreed on both items
    assert summary["unclear_stances"] == 2
