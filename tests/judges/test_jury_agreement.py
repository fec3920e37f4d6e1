"""The jury's arithmetic: Cohen's kappa and Krippendorff's alpha against textbook examples,
the majority rule (ties and no verdict: unscored), HealthBench's score (negative items
subtract, unscored items leave both sides, clipped 0..1) and the reply parser."""

from __future__ import annotations

import pytest

from pytest_groundeval.judges.agreement import cohen_kappa, krippendorff_alpha, pairwise_kappas
from pytest_groundeval.judges.jury import jury_score, majority, parse_verdict
from pytest_groundeval.model import JudgedItem


def test_cohen_kappa_textbook():
    """Wikipedia's example: 50 units, 20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no: p_o 0.7,
    p_e 0.5, kappa 0.4."""
    a = ["y"] * 20 + ["y"] * 5 + ["n"] * 10 + ["n"] * 15
    b = ["y"] * 20 + ["n"] * 5 + ["y"] * 10 + ["n"] * 15
    assert cohen_kappa(a, b) == pytest.approx(0.4)
    assert cohen_kappa(a, a) == pytest.approx(1.0)
    # missing verdicts leave their units out (not a disagreement)
    assert cohen_kappa(a + [None, "y"], b + ["n", None]) == pytest.approx(0.4)
    # one label only on both sides: agreement that says nothing, undefined
    assert cohen_kappa(["y", "y"], ["y", "y"]) is None
    assert cohen_kappa([None], ["y"]) is None
    assert pairwise_kappas([a, b, a]) == [pytest.approx(0.4), pytest.approx(1.0), pytest.approx(0.4)]


def test_krippendorff_alpha_textbook():
    """Krippendorff (2011), "Computing Krippendorff's alpha-reliability", the nominal example:
    4 observers, 12 units, missing values; alpha = 0.743."""
    A = [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None]
    B = [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3]
    C = [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None]
    D = [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None]
    units = [list(u) for u in zip(A, B, C, D)]
    assert krippendorff_alpha(units) == pytest.approx(0.743, abs=5e-4)
    assert krippendorff_alpha([["a", "a"], ["b", "b"]]) == pytest.approx(1.0)
    assert krippendorff_alpha([["a", "a"], ["a", "a"]]) is None  # one value: undefined
    assert krippendorff_alpha([["a", None], [None, "b"]]) is None  # nothing pairable


def test_majority_ties_and_silence_are_unscored():
    assert majority(["met", "met", "not_met"]) == ("met", None)
    assert majority(["met", "met", None]) == ("met", None)
    assert majority(["met", None, None])[0] is None  # one of three: the silent two could overturn it
    assert majority(["met", "not_met"])[0] is None
    assert majority([None, None])[0] is None


def _item(points, verdict):
    return JudgedItem(id=str(points), question="q", points=points, verdict=verdict)


def test_healthbench_score():
    assert jury_score([_item(5, "met"), _item(5, "not_met")]) == 0.5
    assert jury_score([_item(5, "met"), _item(5, None)]) == 1.0  # unscored: out of both sides
    assert jury_score([_item(5, "met"), _item(5, "met"), _item(-10, "met")]) == 0.0  # clipped at 0
    assert jury_score([_item(5, "met"), _item(5, "met"), _item(-5, "met")]) == 0.5
    assert jury_score([_item(5, "met"), _item(-10, "not_met")]) == 1.0
    assert jury_score([_item(5, None), _item(-10, "met")]) is None  # no scored positive item


def test_reply_parser_is_strict():
    assert parse_verdict('{"verdict": "met", "rationale": "fine"}') == ("met", "fine", None)
    assert parse_verdict('```json\n{"verdict": "Not Met", "rationale": "x"}\n```')[0] == "not_met"
    for bad in ("GRADE: C", '{"verdict": "yes"}', '{"verdict": "met"} {"verdict": "met"}', "", None):
        verdict, _, error = parse_verdict(bad)
        assert verdict is None and error
