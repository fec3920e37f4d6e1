"""Finding JSON objects inside free text (model answers: bare, fenced, or amid prose), and
reading the prose around an answer's object for what it states beside it.

An answer is one JSON object with only its schema's keys (:func:`unknown_keys`); the text around
it may repeat what the object states, and nothing else: a number, a date or a flag in the prose
that the object does not state is a second answer (a hedge), found by :func:`unstated_claims`.
What the prose may say besides the object's own values:

* the numbers and dates of the object, its string leaves included (a display's ``5 MG``, a
  unit's ``1.73``), a number rounded to the decimals it is written with (``6.1`` for 6.14, not
  ``7`` for 6.8), or more precise than the object's and rounding to it (``6.83`` for 6.8); a
  date as ISO, ``March 2, 2019``, ``2 Mar 2019`` or ``03/02/2019`` (either reading);
* the number of items of each list of the object ("3 active medications");
* what the caller declares: the task's vocabulary (code tokens such as ``4548-4``, numbers such
  as a threshold, that the question itself names) and spans a derived number may lie in (a
  decline computed from the answer's values, known to their precision);
* list markers (``1.``), times of day, FHIR references (``Patient/abc``) and UUIDs, which are
  not claims.

A flag is ``true``/``false`` written as a word, or ``yes``/``no`` standing as an answer word
("Yes, ...", "no."), read only when the object states the caller's flag key; it must agree.
"Harmless" is the caller's to declare: a key the schema lists as optional (``display``,
RxNorm's ``system``) passes; every other key is ``unknown key: <path>``. Not read: numbers
written as words, a flag said in other words ("not elevated"), what a number counts ("3
matched" is read as the number 3).
"""

from __future__ import annotations

import calendar
import json
import re
from dataclasses import dataclass
from datetime import date
from typing import Any, Iterable

from pytest_groundeval.model import ParseError


#: "{" that start no JSON object, at most, before the text is not read further: each failed
#: attempt costs a scan up to its position (``JSONDecodeError`` counts the lines before it), so a
#: megabyte of "{" would take minutes; no answer a model writes has hundreds of them
MAX_FAILED_STARTS = 200


class UnreadableJson(ValueError):
    """The text cannot be searched for JSON objects within bounds (see :func:`json_objects`)."""


def json_objects(text: str) -> list[dict[str, Any]]:
    """Every top-level JSON object in ``text``, in order (objects nested in one are not repeated).
    See :func:`json_spans`."""
    return [obj for obj, _, _ in json_spans(text)]


def json_spans(text: str) -> list[tuple[dict[str, Any], int, int]]:
    """Every top-level JSON object in ``text`` with its span ``(object, start, end)``, in order.

    :class:`UnreadableJson` for a text with more than :data:`MAX_FAILED_STARTS` "{" that start
    no object, or with JSON the decoder cannot read (nested past the recursion limit, an integer
    of more digits than Python converts): it is an object no reader can take or leave out."""
    decoder = json.JSONDecoder()
    found: list[tuple[dict[str, Any], int, int]] = []
    failed = 0
    i = text.find("{")
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except RecursionError:
            raise UnreadableJson(f"the JSON at offset {i} is nested too deeply to read") from None
        except json.JSONDecodeError:
            failed += 1
            if failed > MAX_FAILED_STARTS:
                raise UnreadableJson(f"more than {MAX_FAILED_STARTS} '{{' in the text start no JSON object: "
                                     "not read further") from None
            i = text.find("{", i + 1)
            continue
        except ValueError as e:  # JSON Python will not convert (an integer past its digit limit)
            raise UnreadableJson(f"the JSON at offset {i} cannot be read: {str(e)[:120]}") from None
        if isinstance(obj, dict):
            found.append((obj, i, end))
        i = text.find("{", end)
    return found


def broken_object(text: str, around: int | None = None) -> str | None:
    """Why the JSON object a text tries to give does not parse: the parser's message at the
    line and column of that object (``Expecting ',' delimiter at line 3 column 5``), for the
    "{" followed by a key (``{"``) that read furthest before failing; None when no "{" starts
    one (prose braces, no braces at all). ``around``: only an object that starts before that
    offset and fails after it (an object the one found is nested in). Only a message."""
    decoder = json.JSONDecoder()
    best: tuple[int, int, json.JSONDecodeError] | None = None
    i, tried = text.find("{"), 0
    while i != -1 and tried <= MAX_FAILED_STARTS and (around is None or i < around):
        tried += 1
        if text[i + 1:i + 200].lstrip().startswith('"'):
            try:
                decoder.raw_decode(text, i)
            except json.JSONDecodeError as e:
                if (around is None or e.pos > around) and (best is None or e.pos - i > best[1] - best[0]):
                    best = (i, e.pos, e)
            except (ValueError, RecursionError):
                pass
        i = text.find("{", i + 1)
    if best is None:
        return None
    start, pos, error = best
    line = text.count("\n", start, pos) + 1
    column = pos - (text.rfind("\n", start, pos) if line > 1 else start - 1)
    return f"{error.msg.removesuffix(' at')} at line {line} column {column}"  # "Unterminated string starting at"


def json_kind(value: Any) -> str:
    """A JSON value's type, as a message names it, with the value (clipped)."""
    if value is None:
        return "null"
    name = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(type(value))
    if name is None:
        name = "a number" if isinstance(value, (int, float)) else type(value).__name__
    shown = repr(value)
    return f"{name} ({shown if len(shown) <= 60 else shown[:57] + '...'})"


# ---------------------------------------------------------------- one answer in its prose
@dataclass(frozen=True)
class Answer:
    """The one JSON object of an answer and the prose around it (the object cut out, and the
    lines of a code fence)."""

    obj: dict[str, Any]
    prose: str


_FENCE = re.compile(r"^[ \t]*(?:```|~~~)[\w-]*[ \t]*$", re.MULTILINE)


def one_answer(text: Any) -> Answer:
    """The one JSON object in ``text`` (bare, fenced, or amid prose) and its prose; no object,
    more than one top-level object, or a text no reader can take (:class:`UnreadableJson`) is a
    :class:`ParseError`."""
    if not isinstance(text, str):
        raise ParseError(f"agent output is {type(text).__name__}, not text")
    if not text.strip():  # (a real model's last turn may be a tool call cut at its cap, and no text)
        raise ParseError("the output is empty: no JSON object to read")
    try:
        found = json_spans(text)
    except UnreadableJson as e:
        raise ParseError(str(e)) from None
    if not found:
        broken = broken_object(text)
        raise ParseError(f"a JSON object that does not parse: {broken}" if broken else "no JSON object found in the output")
    if len(found) > 1:
        raise ParseError(f"found {len(found)} JSON objects in the output; expected exactly one")
    obj, start, end = found[0]
    broken = broken_object(text, around=start) if "{" in text[:start] else None
    if broken:  # the object found is nested in one the model wrote that does not parse: not its answer
        raise ParseError(f"a JSON object that does not parse: {broken}")
    return Answer(obj, _FENCE.sub(" ", text[:start] + "\n" + text[end:]))


def unknown_keys(obj: dict[str, Any], keys: Iterable[str], where: str = "") -> None:
    """A key of ``obj`` outside ``keys`` (the schema's, optional ones included) is a
    :class:`ParseError` ``unknown key: <where><key>``: an answer holds only its schema's keys."""
    allowed = set(keys)
    extra = [k for k in obj if k not in allowed]
    if extra:
        raise ParseError(f"unknown key: {where}{extra[0]}" + (f" (and {extra[1:]})" if extra[1:] else "")
                         + f"; the answer's keys are {sorted(allowed)}")


@dataclass(frozen=True)
class Claim:
    """A number, date (ISO day) or flag stated in an answer's prose, as written."""

    kind: str  # "number" | "date" | "flag"
    text: str
    value: Any  # float | "YYYY-MM-DD" | bool

    def __str__(self) -> str:
        return f"{self.kind} {self.text!r}"


_MONTHS = {m.casefold(): i for i, m in enumerate(calendar.month_abbr) if m}
_MON = r"(?P<mon>jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
_DATES = re.compile(
    r"(?P<iso>\b\d{4}-\d{2}-\d{2})(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
    rf"|\b(?P<d1>\d{{1,2}})(?:st|nd|rd|th)?\s+{_MON}\s*,?\s+(?P<y1>\d{{4}})\b"
    rf"|\b{_MON.replace('mon>', 'mon2>')}\s+(?P<d2>\d{{1,2}})(?:st|nd|rd|th)?\s*,?\s+(?P<y2>\d{{4}})\b"
    r"|\b(?P<a>\d{1,2})/(?P<b>\d{1,2})/(?P<y3>\d{4})\b", re.IGNORECASE)
_NOT_CLAIMS = re.compile(
    r"^[ \t]*(?:\d+[.)]|[-*+])[ \t]+"  # a list marker
    r"|\b\d{1,2}:\d{2}(?::\d{2})?\b"  # a time of day
    r"|\b[A-Z][A-Za-z]+/[A-Za-z0-9][A-Za-z0-9\-.]*"  # a FHIR reference
    r"|\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.MULTILINE | re.IGNORECASE)
_CODE = re.compile(r"(?<![\w.])\d+(?:-\d+)+(?![\w.]?\d)")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?![\w]|\.\d)")
_TRUE_FALSE = re.compile(r"\b(true|false)\b", re.IGNORECASE)
_YES_NO = re.compile(r"(?:^|[.!?:]\s+|\n\s*)(yes|no)\b(?=\s*(?:[,.!:;]|$))", re.IGNORECASE | re.MULTILINE)


def _day(m: re.Match[str]) -> str | None:
    """The ISO day a date match names (a slash date: None when neither reading is a date)."""
    try:
        if m.group("iso"):
            return date.fromisoformat(m.group("iso")).isoformat()
        if m.group("y1"):
            return date(int(m.group("y1")), _MONTHS[m.group("mon")[:3].casefold()], int(m.group("d1"))).isoformat()
        if m.group("y2"):
            return date(int(m.group("y2")), _MONTHS[m.group("mon2")[:3].casefold()], int(m.group("d2"))).isoformat()
    except ValueError:
        return None
    return None


def _slash_days(m: re.Match[str]) -> set[str]:
    out = set()
    for month, day in ((m.group("a"), m.group("b")), (m.group("b"), m.group("a"))):
        try:
            out.add(date(int(m.group("y3")), int(month), int(day)).isoformat())
        except ValueError:
            pass
    return out


def claims(text: str) -> list[Claim]:
    """The dates, code tokens and numbers a text states, in that reading order (a date's digits
    are not also numbers; list markers, times, references and UUIDs are not read)."""
    text = _NOT_CLAIMS.sub(" ", text)
    found: list[Claim] = []

    def take_date(m: re.Match[str]) -> str:
        if m.group("y3"):
            found.append(Claim("date", m.group(0), tuple(sorted(_slash_days(m)))))
        else:
            found.append(Claim("date", m.group(0), _day(m)))
        return " "

    text = _DATES.sub(take_date, text)

    def take_code(m: re.Match[str]) -> str:
        found.append(Claim("code", m.group(0), m.group(0)))
        return " "

    text = _CODE.sub(take_code, text)
    found += [Claim("number", m.group(0), float(m.group(0))) for m in _NUMBER.finditer(text)]
    return found


def _flags(text: str, yes_no: bool) -> list[Claim]:
    out = [Claim("flag", m.group(1), m.group(1).casefold() == "true") for m in _TRUE_FALSE.finditer(text)]
    if yes_no:
        out += [Claim("flag", m.group(1), m.group(1).casefold() == "yes") for m in _YES_NO.finditer(text)]
    return out


def _stated(obj: Any) -> tuple[list[float], set[str], set[str], set[bool]]:
    """What an answer object states: its numbers (string leaves' too, and its lists' lengths),
    its ISO days, its code tokens and strings, its booleans."""
    numbers: list[float] = []
    days: set[str] = set()
    strings: set[str] = set()
    bools: set[bool] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            numbers.append(float(len(node)))
            for v in node:
                walk(v)
        elif isinstance(node, bool):
            bools.add(node)
        elif isinstance(node, (int, float)):
            try:
                numbers.append(float(node))
            except OverflowError:  # an integer past a float: no prose number reads as it
                pass
        elif isinstance(node, str):
            strings.add(node.strip().casefold())
            for c in claims(node):
                if c.kind == "number":
                    numbers.append(c.value)
                elif c.kind == "date":
                    days.update(c.value if isinstance(c.value, tuple) else [c.value])
                else:
                    strings.add(c.value)

    walk(obj)
    return numbers, days, strings, bools


def _decimals(text: str) -> int:
    return len(text.split(".", 1)[1]) if "." in text and "e" not in text.lower() else 0


def _same_number(c: Claim, stated: Iterable[float], spans: Iterable[tuple[float, float]] = ()) -> bool:
    """The prose's number reads as a stated one: equal, or the stated one written to the
    decimals the prose gives (``6.1`` for 6.14; not ``7`` for 6.8), or the stated one is the
    prose's rounded to its own decimals (``6.83`` where the answer gives 6.8); or it lies in one
    of ``spans`` (a quantity the answer's values give only within their precision)."""
    dx = _decimals(c.text)
    for y in stated:
        dy = 0 if float(y).is_integer() else _decimals(repr(float(y)))
        if c.value == y or (dx >= 1 and abs(c.value - y) <= 0.5 * 10 ** -dx + 1e-9) \
                or abs(c.value - y) <= 0.5 * 10 ** -dy + 1e-9 and dx > dy:
            return True
    tol = 0.5 * 10 ** -dx
    return any(lo - tol <= c.value <= hi + tol for lo, hi in spans)


def unstated_claims(prose: str, obj: dict[str, Any], *, codes: Iterable[str] = (), numbers: Iterable[float] = (),
                    spans: Iterable[tuple[float, float]] = (), flag_key: str | None = None) -> list[Claim]:
    """The numbers, dates, code tokens and flags ``prose`` states that ``obj`` does not (see the
    module docstring): each a hedge. ``codes`` and ``numbers``: the task's vocabulary, which the
    prose may name; ``spans``: ranges a number may lie in (what the answer's values give, known
    only to their precision). ``flag_key``: the object's flag; when the object states it, a flag word in
    the prose must agree, and a yes/no answer word counts as one."""
    if not prose.strip():
        return []  # (nothing around the object: nothing stated beside it)
    s_numbers, s_days, s_strings, s_bools = _stated(obj)
    s_numbers += [float(n) for n in numbers]
    known_codes = s_strings | {c.casefold() for c in codes}
    out = []
    for c in claims(prose):
        if c.kind == "number" and _same_number(c, s_numbers, spans):
            continue
        if c.kind == "date" and (set(c.value) & s_days if isinstance(c.value, tuple) else c.value in s_days):
            continue
        if c.kind == "code" and c.value.casefold() in known_codes:
            continue
        out.append(c)
    flag = obj.get(flag_key) if flag_key else None
    if isinstance(flag, bool):
        out += [c for c in _flags(prose, True) if c.value is not flag]
    else:
        out += [c for c in _flags(prose, False) if c.value not in s_bools]
    return out


def refuse_hedges(prose: str, obj: dict[str, Any], **vocabulary: Any) -> None:
    """:func:`unstated_claims` as a :class:`ParseError` naming what the prose states beside the
    object (an answer, then a second one around it)."""
    extra = unstated_claims(prose, obj, **vocabulary)
    if extra:
        raise ParseError(hedge_reason(extra))


def hedge_reason(extra: list[Claim]) -> str:
    shown = ", ".join(str(c) for c in extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
    return f"hedge: the text around the answer states {shown}, which the answer does not: one answer, not two"
