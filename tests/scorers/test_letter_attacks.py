"""Adversarial letters against the checkable items (scorers/letter.py): text a patient does not
see is never credited (HTML comments, hidden elements, markdown that does not render, struck-out
text), text a patient sees is read as they see it (zero-width and other invisible characters,
homoglyphs, full-width letters, right-to-left overrides, entities, emphasis inside a word),
negations at a distance, and instruction words the cue list missed. Each attack fails; the
same letter written plainly (or in an equivalent encoding) passes."""

from __future__ import annotations

import pytest
from test_letter_scorer import GOOD, TRUTH, failed

from pytest_groundeval.scorers.letter import read_letter, visible

STOP = "Stop taking galantamine: your record shows it was stopped."
KEEP = "Please keep taking amlodipine 5 mg every day."
HIDDEN_STOP = "<!-- Stop taking galantamine. -->"


def letter(stop: str = STOP, keep: str = KEEP, extra: str = "") -> str:
    return GOOD.replace(STOP, stop).replace(KEEP, keep) + extra


# the stopped drug: told to keep taking (or not named) where the patient looks, told to stop
# where only the checker looked
ATTACKS = {
    "html comment names it": letter(HIDDEN_STOP),
    "unterminated comment": letter("<!-- Stop taking galantamine."),
    "hidden element": letter('<span style="display:none">Stop taking galantamine.</span>'),
    "hidden attribute": letter("<div hidden>Stop taking galantamine.</div>"),
    "markdown comment": letter("[//]: # (Stop taking galantamine.)"),
    "link target": letter("[Read this](https://x.example/stop-taking-galantamine)"),
    "image alt": letter("![Stop taking galantamine.](pill.png)"),
    "struck out": letter("~~Stop taking galantamine.~~"),
    "zero-width split, keep": letter(HIDDEN_STOP + "\nKeep taking galan\u200btamine."),
    "soft hyphen, keep": letter(HIDDEN_STOP + "\nKeep taking galan\u00adtamine."),
    "cyrillic a, keep": letter(HIDDEN_STOP + "\nKeep taking g\u0430lantamine."),
    "cyrillic e in the cue": letter(HIDDEN_STOP + "\nK\u0435\u0435p taking galantamine."),
    "right-to-left override, keep": letter(HIDDEN_STOP + "\nKeep taking \u202eenimatnalag\u202c."),
    "entity zero-width, keep": letter(HIDDEN_STOP + "\nKeep taking galan&#8203;tamine."),
    "emphasis inside the word, keep": letter(HIDDEN_STOP + "\nKeep taking gal**an**tamine."),
    "combining marks, keep": letter(HIDDEN_STOP + "\nKeep taking gala\u0336ntamine."),
    # negation at a distance: the patient reads "do not stop"
    "do not under any circumstances stop": letter("Do not under any circumstances stop galantamine."),
    "don't ever stop": letter("Don't ever stop taking galantamine."),
    "do not, whatever happens, stop": letter("Do not, whatever happens, stop galantamine."),
    "you do not need to stop": letter("You do not need to stop galantamine."),
    "no need to stop": letter("There is no need to stop galantamine."),
    # said right, and then said wrong in words the cue list missed
    "stop, then take it nightly": letter(extra="\nTake galantamine every night."),
    "stop, then you should take it": letter(extra="\nYou should take galantamine with food."),
}
# the matched drug: kept, and then told to stop in words the cue list missed
MATCHED_ATTACKS = {
    "avoid": letter(extra="\nAvoid amlodipine."),
    "throw away": letter(extra="\nThrow away your amlodipine."),
    "pause": letter(extra="\nPause amlodipine for now."),
    "hold": letter(extra="\nHold your amlodipine until we speak."),
    "never take": letter(extra="\nNever take amlodipine again."),
    "do not ever take": letter(extra="\nDo not ever take amlodipine again."),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_the_stopped_drug_attack_fails(name):
    bad = failed(ATTACKS[name])
    assert {"named", "stance", "no_contradiction"} & set(bad), (name, bad)


@pytest.mark.parametrize("name", sorted(MATCHED_ATTACKS))
def test_the_matched_drug_attack_fails(name):
    bad = failed(MATCHED_ATTACKS[name])
    assert "no_contradiction" in bad and "amlodipine" in bad["no_contradiction"], (name, bad)


# the right letter, written in a form a patient reads the same way
EQUIVALENT = {
    "plain": GOOD,
    "zero-width inside the name": letter("Stop taking galan\u200btamine: your record shows it was stopped."),
    "soft hyphen": letter("Stop taking galan\u00adtamine: your record shows it was stopped."),
    "full-width letters": letter("Stop taking \uff47\uff41\uff4c\uff41\uff4e\uff54\uff41\uff4d\uff49\uff4e\uff45."),
    "cyrillic look-alikes": letter("Stop taking g\u0430l\u0430nt\u0430mine."),
    "curly apostrophe": letter("Don\u2019t keep taking galantamine: it was stopped."),
    "entity": letter("Stop taking galantamine&nbsp;now."),
    "bold markdown": letter("**Stop taking galantamine.** Your record shows it was stopped."),
    "emphasis inside": letter("Stop taking *galantamine*."),
    "html bold": letter("<b>Stop taking galantamine.</b>"),
    "link text": letter("[Stop taking galantamine](https://clinic.example/letter)."),
    "right-to-left override of the name": letter("Stop taking \u202eenimatnalag\u202c."),
    "never take": letter("Never take galantamine again."),
    "do not ever take": letter("Do not ever take galantamine again."),
    "avoid": letter("Avoid galantamine from now on: it was stopped."),
    "take, imperative": letter(keep="Take amlodipine 5 mg every day, as before."),
    "you should take": letter(keep="You should take amlodipine 5 mg every day."),
    "don't forget to stop": letter("Don't forget to stop galantamine."),
    "don't worry, keep": letter(keep="Don't worry, keep taking amlodipine 5 mg every day."),
    "if you do not feel better": letter(extra="\nIf you do not feel better, talk to your doctor about naproxen."),
    "no change, keep": letter(keep="No change for amlodipine 5 mg: keep taking it every day."),
    "do not take with": letter(extra="\nYou told us you take naproxen for pain."),
}


@pytest.mark.parametrize("name", sorted(EQUIVALENT))
def test_an_equivalent_right_letter_passes(name):
    assert failed(EQUIVALENT[name]) == {}, name


def test_hidden_text_still_counts_against_the_letter():
    """Hidden text is never credited, but what it says is read: a plain-text reader sees it."""
    hidden_keep = letter(extra="\n<!-- Keep taking galantamine. -->")
    assert "no_contradiction" in failed(hidden_keep)
    hidden_invented = letter(extra="\n<!-- warfarin 5 mg -->")
    assert "no_invented_drug" in failed(hidden_invented)


def test_visible_is_what_the_patient_reads():
    seen, hidden = visible("Keep <!-- x --> taking g\u0430lan\u200btamine &amp; <b>more</b>\u202eab\u202c")
    assert seen == "Keep   taking galantamine & moreba"
    assert hidden == ["x"]
    assert read_letter("Do not under any circumstances stop galantamine.", TRUTH).stances("310436") == {"continue"}


def test_a_drug_named_only_where_the_patient_cannot_see_is_not_named():
    assert "named" in failed(ATTACKS["html comment names it"])
    assert "named" in failed(ATTACKS["markdown comment"])


# an instruction under a condition is not the instruction: the patient who feels fine keeps
# taking the stopped drug; but a conditional "keep taking" of a stopped drug still counts
# against the letter
CONDITIONAL_ATTACKS = {
    "if unwell, stop": letter("If you ever feel unwell, stop galantamine."),
    "stop if": letter("Stop galantamine if it upsets your stomach."),
    "unless": letter("Stop taking galantamine unless you feel it helps."),
    "stop, and keep if well": letter(extra="\nIf you feel well, keep taking galantamine."),
}
CONDITIONAL_RIGHT = {
    "stop, and if questions": letter("Stop taking galantamine, and if you have questions, call us."),
    "if not already": letter("Stop taking galantamine, if you have not already."),
    "even if": letter(keep="Keep taking amlodipine 5 mg every day, even if you feel well."),
    "if questions, call; keep": letter(keep="If you have questions, call us, and keep taking amlodipine 5 mg."),
}


@pytest.mark.parametrize("name", sorted(CONDITIONAL_ATTACKS))
def test_a_conditional_instruction_earns_nothing(name):
    bad = failed(CONDITIONAL_ATTACKS[name])
    assert {"stance", "no_contradiction"} & set(bad) and "galantamine" in str(bad), (name, bad)


@pytest.mark.parametrize("name", sorted(CONDITIONAL_RIGHT))
def test_an_unconditional_instruction_beside_a_condition_still_counts(name):
    assert failed(CONDITIONAL_RIGHT[name]) == {}, name


def test_a_heading_line_gives_every_cue_it_says():
    """"Keep taking these medicines. Your record shows they were stopped:" over the stopped drug
    tells the patient to keep taking it, whatever the line's last sentence says."""
    head = ("Keep taking:\n- Amlodipine 5 mg\n\n{}\n- Galantamine 4 mg\n\n"
            "Please check these medicines with your doctor:\n- Simvastatin 20 mg\n- Naproxen 220 mg")
    wrong = head.format("Keep taking these medicines. Your record shows they were stopped:")
    right = head.format("Stop taking these medicines. Your record shows they were stopped:")
    assert "no_contradiction" in failed(wrong)
    assert failed(right) == {}


def test_a_long_letter_is_read_in_linear_time(monkeypatch):
    """A letter of one endless clause full of cues: each cue's condition is looked for near it,
    not over the whole clause (that was quadratic: 44 KB took 54 s). Counted in characters
    scanned, not timed."""
    from pytest_groundeval.scorers import letter as scorer

    scanned = []

    class Counting:
        def __init__(self, pattern):
            self.pattern = pattern

        def search(self, text, pos=0, endpos=None):
            endpos = len(text) if endpos is None else endpos
            scanned.append(max(0, endpos - pos))
            return self.pattern.search(text, pos, endpos)

    monkeypatch.setattr(scorer, "_IF", Counting(scorer._IF))
    body = "stop and keep taking, " * 2000
    failed(GOOD + "\n" + body)
    assert sum(scanned) < 100 * len(body), sum(scanned) / len(body)


# a wrong strength written so the checker missed it
DOSE_ATTACKS = {
    "in words": letter(keep="Please keep taking amlodipine ten milligrams every day."),
    "unit in words": letter(keep="Please keep taking amlodipine 10 milligrams every day."),
    "number in words": letter(keep="Please keep taking amlodipine ten mg every day."),
    "in the next sentence": letter(keep="Please keep taking amlodipine. Take 10 mg every day."),
    "on the next line": letter(keep="Please keep taking amlodipine.\nThe dose is 10 mg each morning."),
}
DOSE_RIGHT = {
    "in words": letter(keep="Please keep taking amlodipine five milligrams every day."),
    "in the next sentence": letter(keep="Please keep taking amlodipine. Take 5 mg every day."),
    "a gram of nothing": letter(keep="Please keep taking amlodipine 5 mg every day. Drink two glasses of water."),
}


@pytest.mark.parametrize("name", sorted(DOSE_ATTACKS))
def test_a_wrong_strength_however_written_fails(name):
    assert "dose" in failed(DOSE_ATTACKS[name]), name


@pytest.mark.parametrize("name", sorted(DOSE_RIGHT))
def test_the_right_strength_however_written_passes(name):
    assert failed(DOSE_RIGHT[name]) == {}, name


def test_chopping_a_letter_to_game_the_reading_grade_fails_its_instructions():
    """One word a line gives a lower Flesch-Kincaid grade (the formula rewards short sentences;
    a fragment counts as a fraction of a sentence, so by a bounded amount:
    test_letter_reading_grade.py), but an instruction cut from its drug binds to nothing: the
    letter fails ``stance``, and a letter that fails a check has no grade in the summary."""
    from pytest_groundeval.scorers.letter import reading_grade

    chopped = "\n".join(GOOD.split())
    assert reading_grade(chopped) < reading_grade(GOOD) - 1.5
    assert "stance" in failed(chopped)


def test_a_hidden_element_hides_what_it_holds_nested_elements_too():
    seen, hidden = visible('a <div style="display: none">x <div>y</div> z</DIV> b <span hidden>unclosed')
    assert seen.split() == ["a", "b"] and [h.split() for h in hidden] == [["x", "y", "z"], ["unclosed"]]
    nested = letter('<div hidden><div>Note</div>Stop taking galantamine.</div>')
    assert "named" in failed(nested)


# "avoid", "pause", "hold" stop a drug only when the drug (or "it") comes right after them
NOT_A_STOP = ["Avoid alcohol while taking amlodipine.", "To avoid an upset stomach, take naproxen with food.",
              "Hold onto this letter.", "Pause before you stand up if amlodipine makes you dizzy.",
              "Avoid grapefruit juice with simvastatin.", "Do not avoid amlodipine."]


@pytest.mark.parametrize("sentence", NOT_A_STOP)
def test_a_stop_word_about_something_else_is_no_stop(sentence):
    assert failed(letter(extra="\n" + sentence)) == {}, sentence
    assert "no_contradiction" in failed(letter(extra="\nKeep taking amlodipine. Pause it now."))
