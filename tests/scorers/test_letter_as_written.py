"""Letters as models write them (issue 28, item 2): every medication of the review gets a
stance, so an empty or evasive letter fails; markdown structure (``#`` headings, bold lines, a
list's intro with or without a colon) governs the bullets under it; a pronoun keeps its drug
across a paragraph break; a stop said as "you no longer need it", "come off it", "it is no
longer needed" is a stop. Each wrong letter fails the check named, with a reason; the right
letter written the same way passes."""

from __future__ import annotations

import pytest
from test_letter_scorer import GOOD, failed

TAIL = "\n\nIf you have questions, call the clinic. If you feel very unwell, call 911."


def sectioned(keep: str, stop: str, check: str) -> str:
    return ("Dear Ms Lang,\n\n" + keep + "\n\n- Amlodipine 5 mg\n\n" + stop + "\n\n- Galantamine 4 mg\n\n"
            + check + "\n\n- Simvastatin 20 mg\n- Naproxen 220 mg" + TAIL)


RIGHT = {
    "## headings": sectioned("## Keep taking", "## Stop taking", "## Check with your doctor"),
    "bold lines": sectioned("**Medicines to keep taking**", "**Medicines to stop**",
                            "**Medicines to check with your doctor**"),
    "bold lines with a colon": sectioned("**Keep taking:**", "**Stop taking:**", "**Ask your doctor about:**"),
    "list intros without a colon": sectioned("Please keep taking this medicine", "Please stop taking this one",
                                             "Please check these with your doctor").replace("\n\n- ", "\n- "),
    "html headings": sectioned("<h2>Keep taking</h2>", "<h2>Stop taking</h2>", "<h2>Check with your doctor</h2>"),
    "a table": ("Dear Ms Lang,\n\n| Medicine | What to do |\n|---|---|\n| Amlodipine 5 mg | Keep taking |\n"
                "| Galantamine 4 mg | Stop taking |\n| Simvastatin 20 mg | Check with your doctor |\n"
                "| Naproxen 220 mg | Check with your doctor |" + TAIL),
    "friendly prose": ("Dear Ms Lang,\n\nIt was lovely to see you. Your amlodipine is doing its job, so please carry "
                       "on taking it every day. We have stopped your galantamine, so please stop taking it now. "
                       "Please ask your doctor about simvastatin and naproxen at your next visit." + TAIL),
    "the stop in the paragraph after the name": GOOD.replace(
        "Stop taking galantamine: your record shows it was stopped.",
        "Now, about your galantamine.\n\nPlease stop taking it: your record shows it was stopped."),
}


@pytest.mark.parametrize("name", RIGHT)
def test_a_letter_as_models_write_it_passes(name):
    assert failed(RIGHT[name]) == {}


@pytest.mark.parametrize("letter", ["I don't know.", "Dear Ms Lang,\n\nPlease see your doctor." + TAIL])
def test_an_empty_or_evasive_letter_fails_every_stance(letter):
    why = failed(letter)
    assert "named" in why and "stance" in why
    # the matched drug too: nothing there must be named in the old reading, so this passed
    assert "197361 amlodipine (matched): gives no stance" in why["stance"]


def test_a_matched_drug_left_out_fails():
    letter = GOOD.replace("Please keep taking amlodipine 5 mg every day.\n", "")
    assert "does not name" in failed(letter)["named"]
    assert "amlodipine" in failed(letter)["stance"]


@pytest.mark.parametrize("heading", ["## Stop taking", "**Medicines to stop**", "Please stop these",
                                     "Stop taking:"])
def test_a_heading_over_the_matched_drug_says_stop(heading):
    """The heading decides: a matched drug under a stop heading is told to stop."""
    letter = sectioned("## Keep taking", "## Stop taking", "## Check with your doctor").replace(
        "## Keep taking", heading)
    assert "stop" in failed(letter)["no_contradiction"]


def test_a_section_lasts_to_the_next_one_and_no_further():
    letter = RIGHT["## headings"].replace("## Stop taking", "## Keep taking, too")
    assert "galantamine" in failed(letter)["stance"]
    assert "amlodipine" not in failed(letter).get("stance", "")


def test_an_intro_ends_at_a_paragraph_that_is_not_its_list():
    letter = ("Please stop taking this one\n- Galantamine 4 mg\n\nAmlodipine 5 mg is on your list.\n"
              "Keep taking amlodipine.\nPlease check simvastatin and naproxen with your doctor." + TAIL)
    assert failed(letter) == {}


@pytest.mark.parametrize("stop", ["You no longer need amlodipine.", "You don't need amlodipine any more.",
                                  "Come off amlodipine.", "Amlodipine is no longer needed.",
                                  "Amlodipine is not needed any more.", "You can wean off amlodipine.",
                                  "There is no need for amlodipine now."])
def test_a_stop_in_other_words_is_a_stop(stop):
    """An agent adding such a line for every drug to keep passed (47/47): a contradiction."""
    why = failed(GOOD + "\n" + stop)
    assert "tells the patient to stop" in why["no_contradiction"]


@pytest.mark.parametrize("right", ["You don't need to stop amlodipine.", "There is no need to stop amlodipine.",
                                   "Do not come off amlodipine.", "You do not need to worry about amlodipine."])
def test_a_negated_stop_in_other_words_is_no_stop(right):
    assert failed(GOOD + "\n" + right) == {}


@pytest.mark.parametrize("after", ["Stop your galantamine.\n\nIt was stopped because it no longer helps.",
                                   "Galantamine 4 mg\n\nPlease stop taking this medicine."])
def test_a_pronoun_keeps_its_drug_across_a_paragraph_break(after):
    letter = GOOD.replace("Stop taking galantamine: your record shows it was stopped.", after)
    assert failed(letter) == {}
    kept = letter.replace("Please stop taking this", "Please keep taking this").replace(
        "Stop your galantamine.\n\nIt was stopped", "Stop your galantamine.\n\nKeep taking it. It was stopped")
    assert "no_contradiction" in failed(kept)


@pytest.mark.parametrize("stop", ["Drop galantamine.", "You are done with galantamine now.", "No more galantamine.",
                                  "Galantamine 4 mg.\n\nStop taking."])
def test_more_ways_to_say_stop(stop):
    letter = GOOD.replace("Stop taking galantamine: your record shows it was stopped.", stop)
    assert failed(letter) == {}
    assert "tells the patient to stop" in failed(GOOD + "\n" + stop.replace("galantamine", "amlodipine").replace(
        "Galantamine", "Amlodipine"))["no_contradiction"]


def test_a_bare_cue_binds_the_drug_before_it_and_drop_in_is_no_stop():
    kept = GOOD.replace("Stop taking galantamine: your record shows it was stopped.", "Galantamine 4 mg.\n\nKeep taking.")
    assert "no_contradiction" in failed(kept)
    assert failed(GOOD + "\nDrop in to see us any time.") == {}


COLUMNS = ("Dear Ms Lang,\n\n| Keep taking | Stop taking | Ask your doctor about |\n|:---|:---:|---:|\n"
           "| {keep} | {stop} | Simvastatin 20 mg |\n| | | Naproxen 220 mg |" + TAIL)


def test_a_table_by_columns_gives_each_column_its_header():
    assert failed(COLUMNS.format(keep="Amlodipine 5 mg", stop="Galantamine 4 mg")) == {}
    swapped = failed(COLUMNS.format(keep="Galantamine 4 mg", stop="Amlodipine 5 mg"))
    assert "amlodipine (matched): tells the patient to stop" in swapped["no_contradiction"]


@pytest.mark.parametrize("stop", ["We are taking you off galantamine.", "Galantamine has been taken off your list.",
                                  "Galantamine has been removed from your list."])
def test_taken_off_is_a_stop(stop):
    assert failed(GOOD.replace("Stop taking galantamine: your record shows it was stopped.", stop)) == {}
    assert "no_contradiction" in failed(GOOD + "\n" + stop.replace("galantamine", "amlodipine").replace(
        "Galantamine", "Amlodipine"))


@pytest.mark.parametrize("keep", ["Keep your amlodipine 5 mg as it is.", "Stick with amlodipine 5 mg.",
                                  "Keep on taking amlodipine 5 mg."])
def test_keep_it_and_stick_with_it_are_a_continue(keep):
    assert failed(GOOD.replace("Please keep taking amlodipine 5 mg every day.", keep)) == {}
    assert "no_contradiction" in failed(GOOD + "\n" + keep.replace("amlodipine 5 mg", "galantamine"))


def test_a_section_governs_its_lists_and_its_first_paragraph_only():
    """Prose further down a section ("If you have questions about galantamine ...") is not told
    the section's instruction; a drug alone on its line, bullet or not, is one of its list."""
    later = ("## Stop taking\n- Galantamine 4 mg\n\n## Keep taking\n- Amlodipine 5 mg\n\n"
             "If you have questions about galantamine, call us.\n\n## Check with your doctor\n- Simvastatin\n"
             "- Naproxen" + TAIL)
    assert failed(later) == {}
    unbulleted = ("## Stop taking\n\nGalantamine 4 mg\n\n## Keep taking\n\nAmlodipine 5 mg\n\n"
                  "## Check with your doctor\n\nSimvastatin\n\nNaproxen" + TAIL)
    assert failed(unbulleted) == {}
    swapped = unbulleted.replace("Galantamine 4 mg", "X").replace("Amlodipine 5 mg", "Galantamine 4 mg").replace(
        "X", "Amlodipine 5 mg")
    assert "tells the patient to keep taking" in failed(swapped)["no_contradiction"]


NESTED = ("Dear Ms Lang,\n\n1. **Medicines to keep taking**\n   - Amlodipine 5 mg\n2. **Medicines to stop**\n"
          "   - Galantamine 4 mg\n3. **Medicines to check with your doctor**\n   - Simvastatin 20 mg\n"
          "   - Naproxen 220 mg" + TAIL)
DESCRIBED = ("Dear Ms Lang,\n\n### Keep taking\n- **Amlodipine 5 mg** - for your blood pressure\n\n### Stop taking\n"
             "- **Galantamine 4 mg** - your record shows this was stopped\n\n### Check with your doctor\n"
             "- **Simvastatin 20 mg** - on your list, but you didn't mention it\n"
             "- **Naproxen 220 mg** - you take this, but it's not on your list" + TAIL)


def test_a_numbered_item_over_nested_bullets_is_their_intro():
    assert failed(NESTED) == {}
    swapped = NESTED.replace("keep taking**", "X**").replace("to stop**", "to keep taking**").replace("X**", "stop**")
    assert "no_contradiction" in failed(swapped)


def test_a_bullet_that_only_tells_the_past_takes_its_headings_instruction():
    assert failed(DESCRIBED) == {}
    under_keep = DESCRIBED.replace("### Keep taking", "### Stop taking, too").replace(
        "### Stop taking\n", "### Keep taking\n")
    assert "tells the patient to keep taking" in failed(under_keep)["no_contradiction"]


def test_an_intro_with_no_instruction_ends_the_one_before():
    letter = ("Keep taking these:\n- Amlodipine 5 mg\nOther medicines on your list:\n- Galantamine 4 mg\n\n"
              "Stop taking galantamine.\nPlease check simvastatin and naproxen with your doctor." + TAIL)
    assert failed(letter) == {}
