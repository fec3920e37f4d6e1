"""The reading grade (scorers/letter.py: reading_grade) cannot be bought by chopping text into
fragments (a piece of fewer than three words counts as that fraction of a sentence, however it is
cut: periods, lines, bullets), by words with no vowel (read letter by letter, as "mg" is read),
or by a letter that does not do its job (the summary's grade is over the letters that pass every
check). A letter written plainly keeps its grade; the formula is Flesch-Kincaid's on whole
sentences."""

from __future__ import annotations

import re

import pytest
from test_letter_scorer import GOOD, REALISTIC, TRUTH

from pytest_groundeval.model import CaseResult
from pytest_groundeval.scorers.letter import reading_grade, score_letter, summarize, syllables

WORDS = re.findall(r"[A-Za-z]+(?:'[A-Za-z]+)?", GOOD)
# the letter's sentences whose instructions the checks need, kept whole; the rest chopped
INSTRUCTIONS = [line for line in GOOD.splitlines() if re.search(r"amlodipine|galantamine|simvastatin|naproxen", line,
                                                                 re.I)]


def chopped(sep: str, words: list[str] = WORDS) -> str:
    return sep.join(words) + "."


@pytest.mark.parametrize("name, text", [
    ("one word a sentence", chopped(". ")),
    ("one word a line", chopped("\n")),
    ("one word a bullet", "\n".join("- " + w for w in WORDS)),
    ("capitalised lines", "\n".join(w.capitalize() for w in WORDS)),
    ("two words a sentence", ". ".join(" ".join(WORDS[i:i + 2]) for i in range(0, len(WORDS), 2)) + "."),
])
def test_fragments_buy_at_most_three_words_a_sentence(name, text):
    """However the text is cut, the sentence-length term is at least 0.39 * 3."""
    syl = sum(syllables(w) for w in WORDS) / len(WORDS)
    floor = 0.39 * 3 + 11.8 * syl - 15.59
    assert reading_grade(text) == pytest.approx(floor, abs=0.01), name


def test_what_chopping_buys_is_bounded_by_the_letter_s_own_sentence_length():
    """Chopping the right letter saves at most 0.39 * (its words a sentence - 3), not - 1."""
    pieces = [len(re.findall(r"[A-Za-z]+(?:'[A-Za-z]+)?", p)) for p in re.split(r"[.!?]+|\n+", GOOD)]
    length = len(WORDS) / sum(min(1, n / 3) for n in pieces if n)
    saved = reading_grade(GOOD) - reading_grade(chopped(". "))
    assert 0 < saved <= 0.39 * (length - 3) + 0.01


def test_words_with_no_vowel_are_read_letter_by_letter():
    assert [syllables(w) for w in ("mg", "Dr", "hmm", "BP", "kp", "tkng", "rhythm")] == [2, 2, 3, 2, 2, 4, 1]
    plain = "Please keep taking your medicine every day."
    stripped = "Pls kp tkng yr mdcn vry dy."
    assert reading_grade(stripped) >= reading_grade(plain)


def test_a_whole_sentence_keeps_the_formula():
    # 6 words, 1 sentence, 6 syllables: 0.39 * 6 + 11.8 * 1 - 15.59
    assert reading_grade("The cat sat on the mat.") == pytest.approx(0.39 * 6 + 11.8 - 15.59, abs=0.01)
    # three whole sentences of three words or more: each a full sentence
    text = "The cat sat. The dog ran off. We all went home."
    assert reading_grade(text) == pytest.approx(0.39 * 11 / 3 + 11.8 * 11 / 11 - 15.59, abs=0.01)


def _result(i: int, letter: str) -> CaseResult:
    score = score_letter(letter, TRUTH)
    return CaseResult(case_id=f"c{i}", task="letter", outcome="passed" if score.passed else "failed", score=score)


def test_a_letter_that_fails_its_checks_buys_no_grade():
    """'Ok.' reads at grade -3 but tells the patient nothing: its grade is shown in the case's
    details, not averaged into the summary's."""
    short = score_letter("Ok.", TRUTH)
    assert not short.passed and "reading_grade" not in short.metrics
    assert short.details["reading_grade"] == reading_grade("Ok.")
    good = score_letter(GOOD, TRUTH)
    assert good.passed and good.metrics["reading_grade"] == reading_grade(GOOD)
    summary = summarize([_result(0, GOOD), _result(1, "Ok."), _result(2, REALISTIC[0])])
    assert summary["reading_grade_n"] == 2
    assert summary["reading_grade"] == pytest.approx((reading_grade(GOOD) + reading_grade(REALISTIC[0])) / 2, abs=1e-6)
