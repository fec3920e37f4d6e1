"""How often, whether as needed, and for how long a free-text sig says a dose is taken.

:func:`parse_sig` reads ``dosage.text``, ``patientInstruction`` and
``additionalInstruction[].text`` for the write scorer, which compares what the text states with
the structured dosage (the doses a text states are read by :func:`units.text_doses`). It reads
only what it is sure of; text with nothing it can read gives an empty :class:`Sig` and is
ignored. Deterministic, no dependencies.

Frequencies (administrations per day, a range when the text gives one), each with the words
that say it:

* intervals: ``q6h``, ``q4-6h``, ``Q 8 H``, ``every 8 hours``, ``every 4 to 6 hours``,
  ``every hour`` / ``hourly``, ``every 30 minutes``, ``every 2 days``, ``every other day`` /
  ``alternate days`` / ``QOD``, ``every week`` / ``weekly``, ``every 2 weeks``, ``monthly``;
* counts per day or week: ``once daily``, ``twice a day``, ``three times daily``, ``3 times a
  day``, ``1-2 times daily``, ``3x/day``, ``twice weekly``, ``once a week``; ``daily``, ``every
  day``, ``nightly``, ``every morning``;
* Latin abbreviations: ``QD``, ``BID``, ``TID``, ``QID``, ``QHS``, ``QAM``, ``QPM`` (with or
  without dots);
* a maximum (``no more than 6 times a day``, ``up to 4 times daily``, ``max 3 times a day``)
  is a frequency with ``at_most`` set: it only bounds the structured maximum;
* when the text states no frequency at all, the named times of day it lists (``in the morning
  and at night``, ``with breakfast and with dinner``, ``at bedtime``, ``at 7 am and at noon``,
  ``08:00 and 20:00``: a clock time counts as the part of the day it falls in) are that many
  administrations a day; failing that, weekday names (``every Monday``, ``on Mondays and
  Thursdays``) are once on each;
* weekday names beside a daily (or shorter) frequency restrict it to those days: ``twice daily
  on Mondays and Thursdays`` is 2 on each of them, 4/7 a day on average.

Not frequencies: amounts per day (``4000 mg per day``, ``max 8 tablets in 24 hours``), ``in 48
hours``, ``day 3 of 7``, ``a 10-day course``. ``as needed`` / ``prn`` / ``when needed`` / ``if
needed`` / ``as required`` mark the text as needed (there is no reliable way to say "scheduled",
so its absence states nothing). Durations: ``for 7 days``, ``x 10 days``, ``for 2 weeks``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from pytest_groundeval.scorers.units import fmt

_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
          "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "once": 1, "twice": 2, "thrice": 3}
_N = r"(?:\d+(?:\.\d+)?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_SEP = r"\s*(?:-|–|—|to|or)\s*"
_B = r"(?<![\w.])"
DAYS_PER = {"minute": 1 / 1440, "hour": 1 / 24, "day": 1.0, "week": 7.0, "month": 30.4375}


def _num(token: str) -> float:
    t = token.casefold()
    return float(_WORDS[t]) if t in _WORDS else float(t)


def _unit(token: str) -> str:
    t = token.casefold()
    if t.startswith(("min", "m")) and not t.startswith("mo"):
        return "minute"
    if t.startswith("h"):
        return "hour"
    if t.startswith(("w", "wk")):
        return "week"
    if t.startswith("mo"):
        return "month"
    return "day"


_MIN, _HOUR = r"(?:minutes?|mins?)", r"(?:hours?|hrs?|h)"
_TIME_UNIT = rf"(?:{_MIN}|{_HOUR}|days?|d|weeks?|wks?|w|months?)"
_AT_MOST = r"(?:(?:no|not)\s+more\s+(?:often\s+)?than|not\s+to\s+exceed|up\s+to|at\s+most|max(?:imum)?(?:\s+of)?)\s*"
_COUNT_WORD = rf"(?:{_N}(?:{_SEP}{_N})?\s*(?:x|times?)|once|twice|thrice)"
_PERIOD_WORD = r"(?:(?:a|an|per|each|every|/)\s*(?P<per>day|d|week|wk|month)\b|(?P<ly>daily|weekly|monthly))"

# (pattern, kind): the order matters (a matched span is blanked before the next pattern runs)
_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # "q4-6h", "q 6 h", "q8hr", "Q12H"; "q2d"; "every 4 to 6 hours", "every 8 hours"
    (re.compile(rf"{_B}(?P<max>{_AT_MOST})?(?:q\.?\s*|every\s+)(?P<a>{_N})(?:{_SEP}(?P<b>{_N}))?\s*"
                rf"(?P<u>{_TIME_UNIT})(?![a-z])\.?", re.I), "interval"),
    (re.compile(rf"{_B}(?P<max>{_AT_MOST})?(?:every\s+(?:single\s+)?(?P<u>hour|minute|day|week|month)|(?P<ly>hourly))\b",
                re.I), "every"),
    (re.compile(rf"{_B}(?:every\s+other\s+day|alternate\s+days|on\s+alternate\s+days|q\.?\s*o\.?\s*d\.?)(?![a-z])",
                re.I), "qod"),
    # "three times a day", "1-2 times daily", "3x/day", "twice weekly", "once a week"
    (re.compile(rf"{_B}(?P<max>{_AT_MOST})?(?P<c>{_COUNT_WORD})\s*{_PERIOD_WORD}", re.I), "count"),
    (re.compile(r"(?<![\w.])(?P<abbr>q\.?\s*d|b\.?\s*i\.?\s*d|t\.?\s*i\.?\s*d|q\.?\s*i\.?\s*d|q\.?\s*h\.?\s*s|"
                r"q\.?\s*a\.?\s*m|q\.?\s*p\.?\s*m)\.?(?![a-z])", re.I), "abbr"),
    (re.compile(r"(?<![\w.])(?:daily|every\s+(?:morning|evening|night|day)|each\s+(?:morning|evening|night|day)|"
                r"nightly|once\s+nightly)(?![a-z])", re.I), "daily"),
]
_ABBR = {"qd": 1, "bid": 2, "tid": 3, "qid": 4, "qhs": 1, "qam": 1, "qpm": 1}

# named times of day (when the text gives no frequency): each slot is one administration
_SLOTS = [
    ("morning", r"\b(?:morning|breakfast|on\s+waking)\b"),
    ("noon", r"\b(?:noon|midday|lunch)\b"),
    ("afternoon", r"\bafternoon\b"),
    ("evening", r"\b(?:evening|dinner|supper)\b"),
    ("night", r"\b(?:night|bedtime|hs)\b"),
]
# clock times ("7 am", "8:30 p.m.", "20:00") name a slot by their hour
_CLOCK = re.compile(r"(?<![\w.:])(?P<h>\d{1,2})(?::(?P<m>\d\d))?\s*(?P<ap>a\.?\s*m\.?|p\.?\s*m\.?)(?![a-z])|"
                    r"(?<![\w.:])(?P<h24>[01]?\d|2[0-3]):(?P<m24>[0-5]\d)(?![\d:])", re.I)
# weekday names: a daily frequency "on Mondays and Thursdays" is taken on those days only
_WEEKDAY_NAMES = {"mon": "mon", "tue": "tue", "wed": "wed", "thu": "thu", "fri": "fri", "sat": "sat", "sun": "sun"}
# (full names, or the abbreviations that are not also words: "sat", "sun" and "wed" are)
_WEEKDAY = re.compile(r"\b(?:(?P<d>mon|tues|wednes|thurs|fri|satur|sun)days?|(?P<a>mon|tues?|thu(?:rs?)?|fri))\b", re.I)


def _clock_slot(m: re.Match[str]) -> str | None:
    if m.group("h24") is not None:
        h = int(m.group("h24"))
    else:
        h = int(m.group("h"))
        if not 1 <= h <= 12:
            return None
        pm = m.group("ap").casefold().startswith("p")
        h = (h % 12) + (12 if pm else 0)
    if 4 <= h < 11:
        return "morning"
    if 11 <= h < 13:
        return "noon"
    if 13 <= h < 17:
        return "afternoon"
    if 17 <= h < 21:
        return "evening"
    return "night"
_PRN = re.compile(r"(?<![\w.])(?:as\s+needed|p\.?\s*r\.?\s*n\.?|when\s+needed|if\s+needed|as\s+required|"
                  r"when\s+required|as\s+necessary)(?![a-z])", re.I)
_DURATION = re.compile(rf"(?<![\w.])(?:for|x|×)\s*(?:a\s+further\s+|another\s+|the\s+next\s+)?(?P<a>{_N})"
                       rf"(?:{_SEP}(?P<b>{_N}))?\s*(?P<u>days?|weeks?|months?)(?![a-z])", re.I)


@dataclass(frozen=True)
class SigFrequency:
    """Administrations per day ``low``..``high`` a text states (averaged over the cycle: weekly is
    1/7); ``peak``: on the day they fall (``once weekly`` is one on that day); ``at_most``: a
    stated maximum (``no more than 4 times a day``) that only bounds the structured maximum."""

    low: float
    high: float
    peak: float
    snippet: str
    at_most: bool = False

    def __str__(self) -> str:
        rate = fmt(self.low) if math.isclose(self.low, self.high, rel_tol=1e-9) else f"{fmt(self.low)}-{fmt(self.high)}"
        return ("at most " if self.at_most else "") + f"{rate}/day ({self.snippet!r})"


@dataclass(frozen=True)
class Sig:
    frequencies: tuple[SigFrequency, ...] = ()
    as_needed: str | None = None  # the words that say "as needed", if any
    duration_days: tuple[float, float, str] | None = None  # low, high, words

    def __bool__(self) -> bool:
        return bool(self.frequencies or self.as_needed or self.duration_days)


def _blank(text: str, m: re.Match[str]) -> str:
    return text[: m.start()] + " " * (m.end() - m.start()) + text[m.end():]


def _per_day(count_lo: float, count_hi: float, days: float) -> tuple[float, float, float]:
    """(low, high, peak) for count administrations per ``days``."""
    peak = count_hi * math.ceil(1 / days - 1e-9) if days < 1 else max(1.0, math.ceil(count_hi / days - 1e-9))
    return count_lo / days, count_hi / days, float(peak)


def _period_days(m: re.Match[str], kind: str) -> float:
    """The (shortest) period a matched frequency is stated over, in days."""
    g = m.groupdict()
    if kind == "interval":
        return min(_num(g["a"]), _num(g["b"]) if g.get("b") else _num(g["a"])) * DAYS_PER[_unit(g["u"])]
    if kind == "every":
        return DAYS_PER["hour" if g.get("ly") else g["u"].casefold()]
    if kind == "qod":
        return 2.0
    if kind == "count":
        per = (g.get("per") or g.get("ly") or "day").casefold()
        return 7.0 if per.startswith("w") else 30.4375 if per.startswith("mo") else 1.0
    return 1.0


def _frequency(m: re.Match[str], kind: str) -> tuple[float, float, float] | None:
    g = m.groupdict()
    if kind == "interval":
        a = _num(g["a"])
        b = _num(g["b"]) if g.get("b") else a
        if a <= 0 or b <= 0:
            return None
        unit = DAYS_PER[_unit(g["u"])]
        lo_days, hi_days = min(a, b) * unit, max(a, b) * unit  # every 4-6 h: 4 to 6 a day
        _, high, peak = _per_day(1, 1, lo_days)
        return 1 / hi_days, high, peak
    if kind == "every":
        unit = "hour" if g.get("ly") else g["u"].casefold()
        return _per_day(1, 1, DAYS_PER[unit])
    if kind == "qod":
        return _per_day(1, 1, 2.0)
    if kind == "count":
        c = re.fullmatch(rf"(?P<a>{_N})(?:{_SEP}(?P<b>{_N}))?\s*(?:x|times?)|(?P<w>once|twice|thrice)", g["c"].strip(),
                         re.I)
        if c is None:
            return None
        lo = _num(c.group("w") or c.group("a"))
        hi = _num(c.group("b")) if c.group("b") else lo
        per = (g.get("per") or g.get("ly") or "day").casefold()
        days = 7.0 if per.startswith("w") else 30.4375 if per.startswith("mo") else 1.0
        if lo <= 0 or hi < lo:
            return None
        return _per_day(lo, hi, days)
    if kind == "abbr":
        n = _ABBR[re.sub(r"[\s.]", "", g["abbr"]).casefold()]
        return float(n), float(n), float(n)
    return 1.0, 1.0, 1.0  # daily


def parse_sig(text: object) -> Sig:
    """What a free-text sig states about frequency, as-needed use and duration (see module doc)."""
    if not isinstance(text, str) or not text.strip():
        return Sig()
    work = text
    durations = []
    for m in list(_DURATION.finditer(work)):
        a = _num(m.group("a"))
        b = _num(m.group("b")) if m.group("b") else a
        unit = DAYS_PER[_unit(m.group("u"))]
        durations.append((min(a, b) * unit, max(a, b) * unit, " ".join(m.group(0).split())))
        work = _blank(work, m)
    days = {_WEEKDAY_NAMES[(m.group("d") or m.group("a")).casefold()[:3]] for m in _WEEKDAY.finditer(text)}
    on_days = len(days) / 7 if days else 1.0  # a daily or shorter frequency applies on those days
    found: list[tuple[int, SigFrequency]] = []
    for pattern, kind in _PATTERNS:
        for m in list(pattern.finditer(work)):
            work = _blank(work, m)
            freq = _frequency(m, kind)
            if freq is None:
                continue
            lo, hi, peak = freq
            if _period_days(m, kind) <= 1:
                lo, hi = lo * on_days, hi * on_days
            found.append((m.start(), SigFrequency(lo, hi, peak, " ".join(m.group(0).split()),
                                                  at_most=bool(m.groupdict().get("max")))))
    if not found:
        slots = {name for name, pattern in _SLOTS if re.search(pattern, work, re.I)}
        slots |= {slot for m in _CLOCK.finditer(work) if (slot := _clock_slot(m)) is not None}
        if slots:
            n = float(len(slots))
            order = [name for name, _ in _SLOTS]
            words = " and ".join(sorted(slots, key=order.index)) + (f" on {len(days)} weekday(s)" if days else "")
            found.append((0, SigFrequency(n * on_days, n * on_days, n, words)))
        elif days and re.search(r"\b(?:every|each|on)\s+(?:mon|tue|wed|thu|fri|satur|sun)", text, re.I):
            n = len(days) / 7  # "every Monday", "on Mondays and Thursdays": once on each
            found.append((0, SigFrequency(n, n, 1.0, f"on {len(days)} weekday(s)")))
    prn = _PRN.search(text)
    duration = None
    if durations:
        lo = min(d[0] for d in durations)
        hi = max(d[1] for d in durations)
        duration = (lo, hi, "; ".join(d[2] for d in durations))
    return Sig(tuple(f for _, f in sorted(found, key=lambda x: x[0])),
               " ".join(prn.group(0).split()) if prn else None, duration)


# ------------------------------------------------------------------ status claims and unsafe advice

# words that say the drug goes on being taken ("continues", "carry on with it", "keep taking"):
# shared with the orders scorer, where they call off a stop
GOES_ON = (r"\b(?:continues|continuing|(?:currently|still)\s+(?:tak\w+|using)|(?:still|remains?|stays?|currently)\s+on"
           r"(?!\s+hold)|carr(?:y|ies|ying)\s+on|go(?:es)?\s+on\s+(?:tak\w+|us\w+|with)|keeps?\s+(?:on\s+)?(?:taking|using|"
           r"with)|continu(?:e|ed)\s+(?:taking|to\s+take|using|on|with|it|this|the|as\s+before)|continue(?=\s*$)|"
           r"(?:do\s+not|don't|never)\s+stop(?!\s+by)|resumed|restarted)\b")
# the present tense of taking ("Patient takes this medication every day", "is using it"): a
# statement that the drug is taken now (a past, an instruction, "took", "take" say nothing of now);
# shared with the orders scorer, where it calls off a stop too
TAKES_NOW = r"\b(?:takes|uses|is\s+(?:taking|using|on\s+(?:this|it|that|these))|has\s+been\s+(?:taking|using|on(?!\s+hold)))\b"
# words that say the drug is no longer taken / put on hold / never taken; each claim is
# compatible only with the statuses listed (a text saying "stopped" on an active statement
# calls off what its status says)
_STATUS_CLAIMS: tuple[tuple[str, re.Pattern[str], frozenset[str]], ...] = tuple(
    (name, re.compile(pattern, re.I), frozenset(ok)) for name, pattern, ok in (
        ("stopped", r"\b(?:stop(?:ped|s)?|discontinu(?:e|ed|es|ation)|d/c(?:'?d)?|quit|ceased?|no\s+longer\s+"
                    r"(?:tak\w*|on|us\w*|need\w*)|came\s+off|come\s+off)\b",
         ("stopped", "completed", "on-hold", "entered-in-error")),
        ("on-hold", r"\b(?:on\s+hold|held|paused|suspended)\b", ("on-hold", "stopped")),
        ("not-taken", r"\b(?:denies|denied|never\s+(?:took|taken|used)|has\s+not\s+taken|not\s+taking|does\s+not\s+take|"
                      r"doesn't\s+take)\b", ("not-taken", "stopped")),
        ("completed", r"\b(?:completed|finished)\b", ("completed", "stopped")),
        ("intended", r"\b(?:will\s+(?:start|begin)|plans?\s+to\s+(?:start|begin)|not\s+(?:yet\s+)?started)\b",
         ("intended", "not-taken")),
        ("active", rf"{GOES_ON}|{TAKES_NOW}", ("active",)),
    ))
# a status word under these is no claim: "do not stop", "stop if a rash appears"
_NEGATED = re.compile(r"(?:\b(?:not|never|without|before|unless|if|should|until|no\s+longer)\b|n't\b)[^.;:!?]{0,40}$",
                      re.I)
_CONDITIONAL_AFTER = re.compile(r"^[^.;:!?]{0,40}\b(?:if|unless|should|when|after|once|until|at\s+the\s+end)\b",
                                re.I)
_SENTENCE = re.compile(r"[^.;!?\n]+")


def status_claims(text: object) -> list[tuple[str, str, frozenset[str]]]:
    """``[(claim, words, statuses it agrees with)]``: what a free text says about whether the
    drug is taken (``stopped``, ``on hold``, ``denies``, ``completed``, ``will start``,
    ``continues``). A word under a negation in its sentence ("do not stop") is no claim, nor a
    stop under a condition or a time ("stop if a rash appears", "stop after 7 days")."""
    if not isinstance(text, str):
        return []
    out = []
    for sentence in _SENTENCE.findall(text):
        for name, pattern, ok in _STATUS_CLAIMS:
            for m in pattern.finditer(sentence):
                if _NEGATED.search(sentence[: m.start()]) or (
                        name == "stopped" and _CONDITIONAL_AFTER.match(sentence[m.end():])):  # "stop after 7 days"
                    continue
                out.append((name, " ".join(m.group(0).split()), ok))
    return out


_ALCOHOL = r"(?:alcohol\w*|wine|beer|liquor|spirits|vodka|whisk(?:e)?y|gin|rum|booze|cocktails?|drinks?\s+of)"
_CAUTION = re.compile(r"n't\b|\b(?:avoid\w*|not|no|never|without|limit\w*|refrain\w*|abstain\w*|minimi[sz]e\w*|"
                      r"less|reduce\w*|nor|free|instead\s+of|risk\w*|caution\w*|warn\w*|interact\w*|increase\w*|"
                      r"worsen\w*|danger\w*|unsafe|harm\w*|bleed\w*|drows\w*|dizz\w*)\b", re.I)
_UNSAFE: tuple[tuple[str, re.Pattern[str]], ...] = tuple((why, re.compile(p, re.I)) for why, p in (
    ("alcohol with the medication", rf"\b{_ALCOHOL}\b"),
    ("an uncapped dose", r"\bas\s+(?:much|many|often)\s+as\s+(?:you|they|she|he|the\s+patient)\s+"
                         r"(?:need|want|like|wish)s?\b|\bno\s+(?:limit|maximum)\b"),
    ("a doubled or catch-up dose", r"\b(?:double|doubled|extra|catch[\s-]*up|make\s+up)\s+(?:the\s+|a\s+|your\s+)?dos"
                                   r"(?:e|es|ing)\b|\btake\s+two\s+next\s+time\b|\bextra\s+(?:tablets?|pills?|capsules?|"
                                   r"puffs?)\b|\btake\s+more\b"
                                   # a multiple of the dose said in words, whatever the structure says
                                   r"|\b(?:twice|two\s+times|three\s+times|thrice|triple|treble|double|quadruple)\s+"
                                   r"(?:the\s+|your\s+|a\s+|his\s+|her\s+|their\s+)?(?:usual\s+|normal\s+|prescribed\s+|"
                                   r"regular\s+|recommended\s+|daily\s+|current\s+)*(?:dose|dosage|amount)s?\b"),
    ("sharing the medication", r"\bshar(?:e|ing)\b[^.;!?]{0,40}\b(?:with|others?|family|friends?)\b"),
))


def unsafe_advice(text: object) -> list[tuple[str, str]]:
    """``[(what is unsafe, the words)]``: instructions in a free text that put the patient at
    risk whatever the drug's dose (alcohol with it, an uncapped or doubled dose, sharing it).
    Said as a caution ("avoid alcohol", "do not double the dose") it is no instruction."""
    if not isinstance(text, str):
        return []
    out = []
    for sentence in _SENTENCE.findall(text):
        if _CAUTION.search(sentence):
            continue
        for why, pattern in _UNSAFE:
            m = pattern.search(sentence)
            if m:
                out.append((why, " ".join(m.group(0).split())))
    return out


__all__ = ["GOES_ON", "TAKES_NOW", "Sig", "SigFrequency", "parse_sig", "status_claims", "unsafe_advice"]
