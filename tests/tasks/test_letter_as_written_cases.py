"""The issue's letter figures on every committed case (issue 28, item 2): correct letters written
the way models write them (markdown headings, bold lines, list intros without a colon, tables by
rows and by columns, friendly prose) pass on all 47 cases (they passed 0/47 with headings); an
empty letter and the "you no longer need X" agent (it passed 47/47) fail on all of them."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from pytest_groundeval.scorers.letter import score_letter
from pytest_groundeval.tasks.letter import LetterTask, plain_name, template_letter

TAIL = "\n\nIf you have questions, call the clinic. If you feel very unwell, call 911."


@pytest.fixture(scope="module")
def truths():
    task = LetterTask(FIXTURES / "reconciliation")
    return [task.load(ref).truth for ref in task.discover()]


def groups(truth):
    by = {"keep": [], "stop": [], "check": []}
    for t in truth["items"]:
        v = t["verdict"]
        by["keep" if v == "matched" else "stop" if v == "stopped-but-taking" else "check"].append(
            plain_name(t["display"]))
    return by


def sections(titles, bullet="- "):
    def make(truth):
        by, out = groups(truth), ["Dear patient,", ""]
        for key, title in zip(("keep", "stop", "check"), titles):
            if by[key]:
                out += [title] + [f"{bullet}{n}" for n in by[key]] + [""]
        return "\n".join(out) + TAIL
    return make


def rows(truth):
    by = groups(truth)
    table = ["| Medicine | What to do |", "|---|---|"]
    for key, say in (("keep", "Keep taking"), ("stop", "Stop taking"), ("check", "Check with your doctor")):
        table += [f"| {n} | {say} |" for n in by[key]]
    return "Dear patient,\n\n" + "\n".join(table) + TAIL


def columns(truth):
    by = groups(truth)
    cells = [", ".join(by[k]) for k in ("keep", "stop", "check")]
    return ("Dear patient,\n\n| Keep taking | Stop taking | Check with your doctor |\n|---|---|---|\n| "
            + " | ".join(cells) + " |" + TAIL)


def prose(truth):
    by, out = groups(truth), ["Dear patient,", ""]
    if by["keep"]:
        out.append("Please carry on with " + ", ".join(by["keep"]) + " just as you have been.")
    out += [f"We have stopped your {n}, so please stop taking it now." for n in by["stop"]]
    out += [f"Please ask your doctor about {n} at your next visit." for n in by["check"]]
    return "\n".join(out) + TAIL


RIGHT = {
    "## headings": sections(("## Keep taking", "## Stop taking", "## Check with your doctor")),
    "bold lines": sections(("**Medicines to keep taking**", "**Medicines to stop**",
                            "**Medicines to check with your doctor**")),
    "intros without a colon": sections(("Please keep taking these medicines", "Please stop taking these medicines",
                                        "Please check these with your doctor")),
    "numbered under bold": sections(("**What to keep taking:**", "**What to stop:**",
                                     "**What to ask your doctor about:**"), bullet="1. "),
    "a table by rows": rows, "a table by columns": columns, "friendly prose": prose,
    "the template": lambda truth: template_letter(truth["items"]),
}


@pytest.mark.parametrize("name", RIGHT)
def test_a_right_letter_as_models_write_it_passes_every_case(truths, name):
    scores = [score_letter(RIGHT[name](t), t) for t in truths]
    failing = [s.reason for s in scores if not s.passed]
    assert not failing, failing[:2]


def no_longer_needed(truth):
    return template_letter(truth["items"]) + "\n\n" + "\n".join(
        f"You no longer need {plain_name(t['display'])}." for t in truth["items"] if t["verdict"] == "matched")


@pytest.mark.parametrize("wrong, check", [(lambda t: "I don't know.", "stance"), (no_longer_needed, "no_contradiction")])
def test_a_wrong_letter_fails_every_case(truths, wrong, check):
    assert len(truths) == 47
    for t in truths:
        if wrong is no_longer_needed and not any(i["verdict"] == "matched" for i in t["items"]):
            continue
        score = score_letter(wrong(t), t)
        assert not score.passed and not score.dimensions[check].passed, score.reason
