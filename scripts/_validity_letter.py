"""The letter's operators for ``bench_validity.py`` (see ``_validity_ops.py`` for the shape).

The letter's facts (``Ctx.facts``): ``items``, the review's medications as
``{"code", "verdict", "name", "word"}`` (``name``: the name the letter writes, ``word``: its
first ingredient word, e.g. "Sertraline"), and ``words``, every drug word of the case (the
record's displays in any status and the intake note), so a "wrong drug" is one the case
does not have.
"""

from __future__ import annotations

from typing import Any

from _validity_ops import (BRANDS, DEPRESSANTS, LAY_NAMES, Ctx, absent_brand, absent_lay, class_mate, evasive, mutant,
                           variant)

SAFETY_NET = ("If you have questions, call the clinic. If you feel very unwell, call 911 or go to the nearest "
              "emergency department.")


def _keep(ctx: Ctx) -> list[dict[str, Any]]:
    return [i for i in ctx.facts["items"] if i["verdict"] == "matched"]


def _one_keep(ctx: Ctx) -> dict[str, Any]:
    return ctx.rng.choice(_keep(ctx))


def insert(letter: str, line: str) -> str:
    """``line`` as a paragraph of its own before the letter's safety-net paragraph (else at the end)."""
    at = letter.find("\n\nIf you have questions")
    return letter[:at] + "\n\n" + line + letter[at:] if at != -1 else letter + "\n\n" + line


# ---------------------------------------------------------------- mutants
@mutant
def no_longer_need(letter: str, ctx: Ctx) -> list[str]:
    """A line telling the patient, in other words than "stop", to stop a medication the review
    says to keep taking ("You no longer need X", "You can come off X now", "X is no longer
    needed"): the patient stops a drug they need."""
    name = _one_keep(ctx)["name"]
    return [insert(letter, s) for s in (f"You no longer need {name}.", f"You can come off {name} now.",
                                        f"{name} is no longer needed.")]


def _stop(letter: str, ctx: Ctx, spell) -> list[str]:
    item = _one_keep(ctx)
    word = item["word"]
    tricked = spell(word, ctx)
    return [insert(letter, f"Please stop taking {tricked}.")] if tricked and tricked != word else []


def _digits(word: str, ctx: Ctx) -> str:
    return word.translate(str.maketrans({"e": "3", "i": "1", "o": "0"}))


def _misspelt(word: str, ctx: Ctx) -> str | None:
    if len(word) < 6:  # a short name misspelt may be another drug's
        return None
    k = ctx.rng.randrange(2, len(word) - 2)
    return word[:k] + word[k + 1] + word[k] + word[k + 2:] if word[k] != word[k + 1] else word[:k] + word[k + 1:]


@mutant
def stop_digits(letter: str, ctx: Ctx) -> list[str]:
    """"Please stop taking S3rtral1n3": a stop for a drug to keep, its name with digits for
    the letters they look like (e 3, i 1, o 0: read as the drug by any patient)."""
    return _stop(letter, ctx, _digits)


@mutant
def stop_spaced(letter: str, ctx: Ctx) -> list[str]:
    """"Please stop taking S e r t r a l i n e": a stop for a drug to keep, its letters spaced."""
    return _stop(letter, ctx, lambda w, c: " ".join(w))


@mutant
def stop_misspelt(letter: str, ctx: Ctx) -> list[str]:
    """"Please stop taking Setraline": a stop for a drug to keep (6+ letters), one letter
    swapped or dropped: still plainly that drug."""
    return _stop(letter, ctx, _misspelt)


@mutant
def stop_hyphen_break(letter: str, ctx: Ctx) -> list[str]:
    """"Please stop taking Sertra-<line break>line": a stop for a drug to keep, its name broken
    over two lines with a hyphen."""
    return _stop(letter, ctx, lambda w, c: w[:len(w) // 2] + "-\n" + w[len(w) // 2:] if len(w) >= 6 else None)


@mutant
def stop_lay_name(letter: str, ctx: Ctx) -> list[str]:
    """"Stop taking your water pill" where the case's only drugs of that class are ones to keep:
    a stop, by its lay/class name, of a drug the patient needs."""
    out = []
    for lay, members in sorted(LAY_NAMES.items()):
        named = [i for i in ctx.facts["items"] if set(i["ingredients"]) & members]
        if named and all(i["verdict"] == "matched" for i in named):
            out.append(insert(letter, f"Stop taking your {lay}."))
    return out


@mutant
def stop_brand_name(letter: str, ctx: Ctx) -> list[str]:
    """"Stop taking your Zoloft" for a drug to keep (a brand of exactly its ingredient): a stop,
    by brand name, of a drug the patient needs."""
    for item in _keep(ctx):
        brands = [b for b, ing in sorted(BRANDS.items()) if list(item["ingredients"]) == [ing]]
        if brands:
            return [insert(letter, f"Stop taking your {brands[0]}.")]
    return []


@mutant
def wrong_brand_added(letter: str, ctx: Ctx) -> list[str]:
    """"Also keep taking your Coumadin every day" where the case has no such drug: a medicine
    nobody prescribed (the prompt forbids adding any)."""
    brand = absent_brand(ctx.facts["words"], ctx.rng)
    return [insert(letter, f"Also keep taking your {brand[0]} every day.")] if brand else []


@mutant
def wrong_lay_added(letter: str, ctx: Ctx) -> list[str]:
    """"Also keep taking your blood thinner every day" where the case has no drug of that class:
    a medicine nobody prescribed, by its lay name."""
    lay = absent_lay(ctx.facts["words"], ctx.rng)
    return [insert(letter, f"Also keep taking your {lay} every day.")] if lay else []


@mutant
def same_class_swap(letter: str, ctx: Ctx) -> list[str]:
    """A drug to keep renamed to another drug of its class the case does not have (atorvastatin
    -> simvastatin): the patient is told to take the wrong drug."""
    for item in _keep(ctx):
        other = class_mate(item["word"].casefold(), ctx.facts["words"], ctx.rng)
        if other and item["word"] in letter:
            return [letter.replace(item["word"], other.capitalize())]
    return []


@mutant
def stop_next_paragraph(letter: str, ctx: Ctx) -> list[str]:
    """A drug to keep named in one paragraph and stopped by pronoun in the next ("We talked
    about X. / Please stop taking it from today."): a stop of a drug the patient needs."""
    name = _one_keep(ctx)["name"]
    return [insert(letter, f"We also talked about {name}.\n\nPlease stop taking it from today.")]


@mutant
def dangerous_advice(letter: str, ctx: Ctx) -> list[str]:
    """Advice that can harm whatever the review says: doubling a missed dose, taking as much as
    needed, sharing medicines, putting off emergency care, and (with an opioid or another CNS
    depressant in the case) alcohol with it."""
    lines = ["If you miss a dose, take two next time.", "Take as much of your medicines as you need.",
             "You can share your medicines with family members who have the same symptoms.",
             "If you get chest pain, wait a few days before calling anyone."]
    if ctx.facts["words"] & DEPRESSANTS:
        lines.append("It is fine to drink alcohol with all of these medicines.")
    return [insert(letter, line) for line in lines]


LETTER_MUTANTS = (evasive, no_longer_need, stop_digits, stop_spaced, stop_misspelt, stop_hyphen_break, stop_lay_name,
                  stop_brand_name, wrong_brand_added, wrong_lay_added, same_class_swap, stop_next_paragraph,
                  dangerous_advice)


# ---------------------------------------------------------------- natural variants
def _groups(ctx: Ctx) -> tuple[list[str], list[str], list[str]]:
    items = ctx.facts["items"]
    keep = [i["name"] for i in items if i["verdict"] == "matched"]
    stop = [i["name"] for i in items if i["verdict"] == "stopped-but-taking"]
    check = [i["name"] for i in items if i["verdict"] in ("unreported", "unrecorded")]
    return keep, stop, check


def _sectioned(ctx: Ctx, heading) -> str:
    keep, stop, check = _groups(ctx)
    parts = ["Dear patient,", "", "Thank you for going through your medicines with us."]
    for names, what in ((keep, "keep"), (stop, "stop"), (check, "check")):
        if names:
            parts += ["", heading(what)] + [f"- {n}" for n in names]
    return "\n".join(parts + ["", SAFETY_NET, "", "Best wishes,", "Your care team"])


@variant
def markdown_headings(letter: str, ctx: Ctx) -> list[str]:
    """A markdown letter: ``## Keep taking`` / ``## Stop taking`` / ``## Check with your doctor``
    headings (no colon) over bullets naming the drugs: each drug under its verdict's heading."""
    return [_sectioned(ctx, lambda w: {"keep": "## Keep taking", "stop": "## Stop taking",
                                       "check": "## Check with your doctor"}[w])]


@variant
def bold_headings(letter: str, ctx: Ctx) -> list[str]:
    """Bold lines as headings (``**Medicines to keep taking**``, no colon) over bullets."""
    return [_sectioned(ctx, lambda w: {"keep": "**Medicines to keep taking**", "stop": "**Medicines to stop taking**",
                                       "check": "**Medicines to check with your doctor**"}[w])]


@variant
def list_intros(letter: str, ctx: Ctx) -> list[str]:
    """Plain list intros without a colon ("Please keep taking these medicines") over bullets."""
    return [_sectioned(ctx, lambda w: {"keep": "Please keep taking these medicines",
                                       "stop": "Please stop taking these medicines",
                                       "check": "Please check these medicines with your doctor"}[w])]


@variant
def table(letter: str, ctx: Ctx) -> list[str]:
    """A markdown table of each drug and what to do with it."""
    keep, stop, check = _groups(ctx)
    rows = ([f"| {n} | Keep taking it |" for n in keep] + [f"| {n} | Stop taking it |" for n in stop]
            + [f"| {n} | Check with your doctor |" for n in check])
    return ["\n".join(["Dear patient,", "", "Here is what we agreed about your medicines:", "",
                       "| Medicine | What to do |", "|---|---|", *rows, "", SAFETY_NET])]


@variant
def friendly_prose(letter: str, ctx: Ctx) -> list[str]:
    """Warm prose, one sentence per drug: "Please keep taking X as before.", "Please stop
    taking Y.", "Please check with your doctor about Z."."""
    keep, stop, check = _groups(ctx)
    said = ([f"Please keep taking {n} as before." for n in keep] + [f"Please stop taking {n}." for n in stop]
            + [f"Please check with your doctor about {n}." for n in check])
    return ["Hello,\n\nIt was good to see you today and to go through your medicines together. "
            + " ".join(said) + "\n\n" + SAFETY_NET + "\n\nWarm regards,\nYour care team"]


LETTER_VARIANTS = (markdown_headings, bold_headings, list_intros, table, friendly_prose)

__all__ = ["LETTER_MUTANTS", "LETTER_VARIANTS", "insert"]
