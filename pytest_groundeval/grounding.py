"""Behavioural consistency (``grounded``) of a tool-using agent, from its recorded transcript.

Correct is not the same as grounded: an agent that answers the right RxNorm code from
memory is right by luck. Per case, three checks, each with a reason:

* ``values``: every value the task names in the parsed answer (its ``grounding_values``:
  codes; for write also the display and the dose strength in it, e.g. ``200 MG``) appears
  in the result of a tool call the agent received *before* its final answer. Evidence is
  a tool's own output: the task's ``answer_tool`` and ``validate_tool`` only echo what the
  agent passed them, and a result's top-level fields that equal an argument of the call
  (a lookup's ``query``) are echoes too. Matching is on the results' JSON text, on whole
  tokens (a code ``10`` is not found inside ``1049``), displays and strengths ignoring
  case and spacing.
* ``validated`` (tasks with a ``validate_tool``): the agent validated before answering,
  its last validation reported the resource valid (a failed validation was fixed and
  validated again), and it did not rebuild after that last validation.
* ``repeats``: no identical tool call (same name, same arguments) more than
  ``max_repeats`` times.

The transcript is an agent conversation (``agents/langgraph_agent.py`` ``transcript_of``:
AI messages with ``tool_calls``, tool messages with results). A transcript with no tool
call in it (a single-call agent; a fixed pipeline's call list, as the offline baseline's,
is no agent's choice either) is *not applicable*: it is neither a
pass nor a fail and stays out of the ``grounded`` rate. The runner records the dimension
beside the scorer's (``runner.score_case``); it changes a case's pass only under
``--require-grounded``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from .scorers.base import Check, Dimension

NAME = "grounded"
DEFAULT_MAX_REPEATS = 3
NOT_APPLICABLE = ("not applicable: no agent tool call in the transcript "
                  "(a single-call agent, or a fixed pipeline such as the baseline)")

# a dose strength as RxNorm displays write it: "200 MG", "0.5 MG/ML", "250 MG/5ML", "5 %"
STRENGTH = re.compile(r"(?<![\w./])(\d+(?:\.\d+)?)\s*(MG|MCG|G|ML|UNT|MEQ|MMOL|%|ACTUAT|HR)"
                      r"(?:\s*/\s*((?:\d+(?:\.\d+)?)?\s*(?:ML|HR|ACTUAT|G|MG|L)))?(?![\w])", re.IGNORECASE)


@dataclass
class Step:
    """One tool call of the transcript and the result the agent got (None: none recorded)."""

    index: int  # position of the result (or of the call when it got none) in the transcript
    name: str | None
    args: Any
    result: Any = None
    has_result: bool = False


@dataclass
class GroundingResult:
    applicable: bool
    checks: list[Check] = field(default_factory=list)
    ungrounded: dict[str, list[str]] = field(default_factory=dict)
    reason: str = ""

    @property
    def passed(self) -> bool:
        return self.applicable and all(c.passed for c in self.checks)

    def dimension(self) -> Dimension:
        return Dimension.from_checks(NAME, self.checks)


def strengths(text: str | None) -> list[str]:
    """The dose strengths written in ``text`` (``"Ibuprofen 200 MG Oral Tablet"`` -> ``["200 MG"]``)."""
    out = []
    for m in STRENGTH.finditer(text or ""):
        per = re.sub(r"\s+", "", m.group(3) or "").upper()
        s = f"{m.group(1)} {m.group(2).upper()}" + (f"/{per}" if per else "")
        if s not in out:
            out.append(s)
    return out


def _steps(transcript: list[dict[str, Any]]) -> tuple[list[Step], int]:
    """The tool calls in order, and where the final answer is (index of the last AI
    message without tool calls after every tool result; else the transcript's end)."""
    steps: list[Step] = []
    by_id: dict[Any, Step] = {}
    final = len(transcript)
    for i, e in enumerate(transcript):
        if not isinstance(e, dict):
            continue
        kind = e.get("type")
        if kind == "ai":
            for c in e.get("tool_calls") or []:
                step = Step(index=i, name=c.get("name"), args=c.get("args"))
                steps.append(step)
                by_id[c.get("id")] = step
        elif kind == "tool":
            step = by_id.get(e.get("tool_call_id"))
            if step is None:
                step = Step(index=i, name=e.get("tool"), args=None)
                steps.append(step)
            step.index, step.result, step.has_result = i, e.get("result"), True
    for i in range(len(transcript) - 1, -1, -1):
        e = transcript[i]
        if isinstance(e, dict) and e.get("type") == "ai" and not e.get("tool_calls"):
            if all(s.index < i for s in steps):
                final = i
            break
    return steps, final


def _evidence(step: Step) -> str:
    """A result's JSON text, without top-level fields that echo the call's arguments."""
    result = step.result
    if isinstance(result, dict) and isinstance(step.args, dict):
        echoed = list(step.args.values())
        result = {k: v for k, v in result.items() if v not in echoed}
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()


def _found(value: str, texts: Iterable[str], kind: str) -> bool:
    value = value.strip()
    if not value:
        return True
    if kind == "code":
        pattern = re.compile(rf"(?<![0-9A-Za-z]){re.escape(value)}(?![0-9A-Za-z])")
        return any(pattern.search(t) for t in texts)
    if kind == "strength":  # "200 MG" grounded by any strength written in the results
        return any(value.upper() in strengths(t) for t in texts)
    needle = _norm(value)
    return any(needle in _norm(t) for t in texts)


def _validation(steps: list[Step], final: int, tool: str, answer_tool: str | None) -> Check:
    runs = [s for s in steps if s.name == tool and s.index < final]
    if not runs:
        return Check("validated", False, f"never called {tool} before answering")
    last = runs[-1]
    result = last.result if isinstance(last.result, dict) else {}
    failed = [s for s in runs if isinstance(s.result, dict) and s.result.get("valid") is False]
    if result.get("valid") is not True:
        issues = "; ".join(map(str, result.get("issues") or []))[:300]
        return Check("validated", False, f"the last {tool} before answering did not report the resource valid"
                     + (f" ({issues})" if issues else "") + "; it was not fixed and validated again")
    rebuilt = [s for s in steps if answer_tool and s.name == answer_tool and last.index < s.index < final]
    if rebuilt:
        return Check("validated", False, f"called {answer_tool} again after the last {tool}: "
                     "the answer was not validated")
    again = f" after {len(failed)} failed validation(s), fixed and validated again" if failed else ""
    return Check("validated", True, f"validated with {tool} before answering{again}")


def _repeats(steps: list[Step], max_repeats: int) -> Check:
    seen: dict[tuple[str, str], int] = {}
    for s in steps:
        key = (str(s.name), json.dumps(s.args, sort_keys=True, default=str))
        seen[key] = seen.get(key, 0) + 1
    worst = max(seen.items(), key=lambda kv: kv[1], default=None)
    if worst is not None and worst[1] > max_repeats:
        (name, args), n = worst
        return Check("repeats", False, f"{name}({args[:120]}) called {n} times with the same arguments "
                     f"(more than {max_repeats})")
    return Check("repeats", True, f"no identical tool call more than {max_repeats} times")


def grounded(transcript: list[dict[str, Any]] | None, values: dict[str, list[str]], *,
             must_validate: str | None = None, answer_tool: str | None = None,
             max_repeats: int = DEFAULT_MAX_REPEATS, truncated: str | None = None) -> GroundingResult:
    """The ``grounded`` checks of one case (``values``: kind -> the answer's values of that
    kind; kinds ``code``/``strength`` match as tokens/strengths, any other kind as text).
    ``truncated``: the transcript was cut to groundeval's bounds (``bounds.py``), so the
    case is not grounded (dropped steps could hold a repeat, a rebuild, the only tool calls)."""
    steps, final = _steps(transcript or [])
    if truncated:
        check = Check("complete", False, f"the transcript was cut to groundeval's bounds ({truncated}); "
                      "grounding is not judged on part of a transcript")
        return GroundingResult(applicable=True, checks=[check], reason=check.reason)
    if not steps:
        return GroundingResult(applicable=False, reason=NOT_APPLICABLE)
    texts = [_evidence(s) for s in steps if s.has_result and s.index < final
             and s.name not in (must_validate, answer_tool)]
    ungrounded: dict[str, list[str]] = {}
    n = 0
    for kind, vals in values.items():
        for v in vals:
            if v is None or not str(v).strip():
                continue
            n += 1
            if not _found(str(v), texts, kind):
                ungrounded.setdefault(kind, []).append(str(v))
    if ungrounded:
        listed = "; ".join(f"{k} {', '.join(map(repr, vs))}" for k, vs in ungrounded.items())
        checks = [Check("values", False, f"not in any tool result received before the answer: {listed}")]
    else:
        checks = [Check("values", True, f"all {n} value(s) of the answer appear in earlier tool results")]
    if must_validate:
        checks.append(_validation(steps, final, must_validate, answer_tool))
    checks.append(_repeats(steps, max_repeats))
    result = GroundingResult(applicable=True, checks=checks, ungrounded=ungrounded)
    result.reason = result.dimension().reason
    return result


__all__ = ["DEFAULT_MAX_REPEATS", "NAME", "GroundingResult", "grounded", "strengths"]
