"""Behavioural consistency (``grounded``) of a tool-using agent, from what the harness saw.

Correct is not the same as grounded: an agent that answers the right RxNorm code from
memory is right by luck. The evidence is the harness's own log of the calls of the tools
it handed the agent (toolcalls.py: sequence numbers, results, error status), never a
transcript the agent returns itself (kept as ``agent_reported``, shown, not read here).
Per case, four checks, each with a reason:

* ``called``: the agent was given tools and the harness observed at least one call that
  succeeded. A tool-using agent that called none answered from memory, and one whose every
  call failed (an abstention, "no result" or "nothing to do", after errors) answered on
  nothing a tool returned: not grounded.
* ``values``: every value the task names in the parsed answer (its ``grounding_values``:
  codes; for write also the display and the dose strength in it, e.g. ``200 MG``, matched
  by the task's own ``grounding_matchers``) appears
  in a *successful* result (status ``ok``: never an error value, a raised or unfinished
  call) received *before the step that first uses the value*. That step is the first call
  of a tool that takes the answer's values as its input (the task's ``answer_tool`` and
  ``validate_tool``: write's ``build_medication_statement`` / ``validate_medication_statement``)
  whose arguments carry the value; when none does, it is the final answer, after every
  observed call. "Before" is by the log's clock (the result ended before that call started)
  and, when the framework gives steps, in an earlier step (calls a model issued together in
  one message cannot use each other's results). Building the resource from memory and
  looking the code up afterwards is ungrounded. Evidence is a tool's own output: the
  answer and validate tools only echo what the agent passed them, and a result's top-level
  fields that equal an argument of the call (a lookup's ``query``) and a FHIR searchset's
  ``link`` urls (the search's own query) are echoes too.
  Matching is on the results' JSON text, on whole tokens (a code ``10`` is not found
  inside ``1049``), displays ignoring case and spacing, a task's own kinds by its matcher.
  A lookup (the site catalog searched by words: :data:`LOOKUP_TOOLS`) is evidence only for a
  *specific* query: its result lists at most :data:`MAX_LOOKUP_ENTRIES` entries (one lookup
  of every catalog word returns the whole catalog, and then every code is "in a result"), and
  its query shares a word (a strength's number counts; a dose form such as "tablet" does not)
  with the input the agent was given
  (the note, the patient's report or record). Otherwise it grounds nothing, and the reason
  names the query.
* ``validated`` (tasks with a ``validate_tool``): the agent validated before answering,
  its last validation reported the resource valid (a failed validation was fixed and
  validated again), and it did not rebuild after that last validation.
* ``repeats``: no identical tool call (same name, same arguments) more than
  ``max_repeats`` times.
* ``read`` (tasks whose answer is writes: ``grounding_writers``, orders' ``fhir_create`` /
  ``fhir_update`` / ``fhir_transaction``): the first write (when nothing was written, the
  answer) came after a *successful* call of a tool that reads the patient's record
  (``grounding_readers``: ``fhir_search`` / ``fhir_read``); a write, or "nothing is due", decided
  before any look at the record was decided from nothing a tool returned (a catalog lookup is
  no look at the record). The writes' own values are checked as an answer's are (``values``, kind
  ``code``): the id of every existing resource a write targets or references (other than the
  patient the prompt names) and every RxNorm code written must come from a successful result
  received before that write. Codes of fixed protocols (an HbA1c's LOINC) are knowledge, not
  patient data, and are not required of a result.

What grounded=true means, for a clinician: every value the task names (above) was *in this
case's tool results* before it was used: the tools read only this case's patient (and the site
catalog), so no value came from memory, the prompt, an error or another patient. It does not
say the value came from the *relevant* result (an HbA1c answered with the patient's glucose
is grounded and wrong): that is correctness, the task's scorer's.

An agent the harness gave no tools (``observed`` is None: a single-call agent such as
``claude`` or ``chat``, the baseline's fixed pipeline, a ``module:Class`` agent that does not
take its tools from ``toolcalls.harness_tools``) is *not applicable*: it stays out of the
``grounded`` rate, and under ``--require-grounded`` its case fails saying why (the runner,
``runner.score_case``). Otherwise the dimension changes a case's pass only under
``--require-grounded``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from pytest_groundeval.fhir.codes import RXNORM_ALIASES
from pytest_groundeval.fhir.hc_tools import catalog
from pytest_groundeval.scorers.base import Check, Dimension

NAME = "grounded"
DEFAULT_MAX_REPEATS = 3
NOT_APPLICABLE = ("not applicable: the harness gave this agent no tools, so it observed no tool call "
                  "(a single-call agent such as claude or chat, the baseline's fixed pipeline, or a module:Class "
                  "agent that does not take its tools from pytest_groundeval.run.toolcalls.harness_tools); a "
                  "transcript an agent returns itself is never evidence")
RXNORM_SYSTEMS = frozenset(s.lower() for s in RXNORM_ALIASES)  # the canonical URI and its spellings in the wild


def no_tools(task: str) -> str:
    """The not-applicable reason of a task that offers no tools (its inputs are in the prompt)."""
    return (f"not applicable: the {task} task offers no tools (its inputs are in the prompt), so no answer of it "
            "can be grounded by a tool result")


#: the harness's lookups (``fhir/hc_tools``: the site catalog searched by words), whose results
#: are evidence only for a specific query (:func:`_unspecific`); the record's readers are not lookups
LOOKUP_TOOLS = frozenset({"lookup_medication_code"})
MAX_LOOKUP_ENTRIES = 5  # a result listing more grounds nothing
# words a query shares with any note, naming no product (the catalog's own: "tablet", "oral", "take")
NAMES_NOTHING = frozenset(catalog._GENERIC | catalog._STOPWORDS)


def _json(node: Any) -> Any:
    """A JSON text argument (a tool that takes a resource as a dict or as its JSON text) read."""
    if isinstance(node, str) and node.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(node)
        except ValueError:
            return node
    return node


def written_values(args: Any, result: Any = None) -> list[str]:
    """What a write (a FHIR create / update / transaction's arguments, a resource given as a
    dict or as JSON text) takes from the record: the id of an existing resource it targets (an
    update whose ``result`` kept the id; a transaction entry's PUT / PATCH / DELETE url; never
    the id a create proposes, which the server replaces), every reference's id other than a
    Patient's (the prompt names the patient), every RxNorm code."""
    out: list[str] = []
    args = _json(args)
    if isinstance(args, dict):
        res, result = _json(args.get("resource")), _json(result)
        if isinstance(res, dict) and isinstance(res.get("id"), str) and res.get("resourceType") != "Patient" \
                and isinstance(result, dict) and result.get("id") == res["id"]:
            out.append(res["id"])
    stack = [args]
    while stack:
        node = _json(stack.pop())
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        ref = node.get("reference")
        if isinstance(ref, str) and "/" in ref and not ref.startswith(("Patient/", "#", "urn:")):
            out.append(ref.rstrip("/").rsplit("/", 1)[-1])
        code = node.get("code")
        if str(node.get("system", "")).strip().lower() in RXNORM_SYSTEMS and isinstance(code, (str, int)) \
                and not isinstance(code, bool):
            out.append(str(code))
        request = node.get("request")
        if isinstance(request, dict) and str(request.get("method", "")).upper() in ("PUT", "PATCH", "DELETE") \
                and isinstance(request.get("url"), str) and "/" in request["url"]:
            target = request["url"].split("?", 1)[0].rstrip("/").rsplit("/", 1)
            if not target[0].endswith("Patient"):
                out.append(target[-1])
        stack.extend(v for v in node.values() if isinstance(v, (dict, list, str)))
    return list(dict.fromkeys(v for v in out if v.strip()))


@dataclass
class Step:
    """One observed tool call (toolcalls.py) and what came back."""

    seq: int
    name: str | None
    args: Any
    result: Any = None
    status: str = "unfinished"
    step: int | None = None
    started: int = 0
    ended: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.ended is not None

    def before(self, use: "Step | None") -> bool:
        """This call's result was received before ``use`` started (None: the final answer)."""
        if not self.ok:
            return False
        if use is None:
            return True
        if self.step is not None and use.step is not None and self.step >= use.step:
            return False  # issued in the same model message (or later): its result was not seen
        return self.ended < use.started  # type: ignore[operator]


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


def _steps(observed: list[Any]) -> list[Step]:
    """The observed calls (dicts or ``ToolCall`` records) in the order they started."""
    steps = []
    for e in observed:
        e = e.model_dump() if hasattr(e, "model_dump") else e
        if not isinstance(e, dict):
            continue
        steps.append(Step(seq=int(e.get("seq") or 0), name=e.get("tool"), args=e.get("args"), result=e.get("result"),
                          status=str(e.get("status") or "unfinished"), step=e.get("step"),
                          started=int(e.get("started") or 0), ended=e.get("ended")))
    return sorted(steps, key=lambda s: (s.started, s.seq))


def _args_text(step: Step) -> str:
    return step.args if isinstance(step.args, str) else json.dumps(step.args, ensure_ascii=False, default=str)


def _evidence(step: Step) -> str:
    """A result's JSON text, without top-level fields that echo the call's arguments (given as
    an object or as one plain-text argument), nor a
    FHIR Bundle's ``link`` (its urls repeat the search's own query, matched or not) and its
    OperationOutcome entries (warnings that restate the query)."""
    result = step.result
    if isinstance(result, dict) and step.args is not None:
        # the call's arguments: an object's values, or the one argument given as plain text
        # (``tool.invoke("...")``, which LangChain takes as a single-argument tool's input)
        echoed = list(step.args.values()) if isinstance(step.args, dict) else [step.args]
        result = {k: v for k, v in result.items() if v not in echoed}
    if isinstance(result, dict) and result.get("resourceType") == "Bundle":
        result = {k: v for k, v in result.items() if k != "link"}
        if isinstance(result.get("entry"), list):  # an OperationOutcome entry restates the query's problems
            result["entry"] = [e for e in result["entry"] if not (isinstance(e, dict) and isinstance(
                e.get("resource"), dict) and e["resource"].get("resourceType") == "OperationOutcome")]
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()


Matchers = Mapping[str, Callable[[str, str], bool]]


def _found(value: str, texts: Iterable[str], kind: str, matchers: Matchers | None = None) -> bool:
    value = value.strip()
    if not value:
        return True
    if kind == "code":
        pattern = re.compile(rf"(?<![0-9A-Za-z]){re.escape(value)}(?![0-9A-Za-z])")
        return any(pattern.search(t) for t in texts)
    match = (matchers or {}).get(kind)
    if match is not None:  # a kind of the task's own (write's dose strengths)
        return any(match(value, t) for t in texts)
    needle = _norm(value)
    return any(needle in _norm(t) for t in texts)


def _validation(steps: list[Step], tool: str, answer_tool: str | None) -> Check:
    runs = [s for s in steps if s.name == tool]
    if not runs:
        return Check("validated", False, f"never called {tool} before answering")
    last = runs[-1]
    result = last.result if isinstance(last.result, dict) and last.ok else {}
    failed = [s for s in runs if not s.ok or (isinstance(s.result, dict) and s.result.get("valid") is False)]
    if result.get("valid") is not True:
        issues = "; ".join(map(str, result.get("issues") or []))[:300]
        why = "" if last.ok else f" (its call #{last.seq} ended {last.status})"
        return Check("validated", False, f"the last {tool} before answering did not report the resource valid{why}"
                     + (f" ({issues})" if issues else "") + "; it was not fixed and validated again")
    rebuilt = [s for s in steps if answer_tool and s.name == answer_tool and s.started > last.started]
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


def _words(text: str) -> set[str]:
    """The words of a text that a lookup's query can share with the case's input: letters (3
    or more, a plural's ``s`` folded) and numbers (a strength), case folded."""
    found = re.findall(r"[^\W\d_]{3,}|\d+(?:\.\d+)?", text.casefold())
    return {w[:-1] if len(w) > 3 and w.endswith("s") and not w[-2].isdigit() else w for w in found}


def input_words(inputs: Any) -> set[str] | None:
    """The words of the input the agent was given (its text values, a JSON text read: the
    note, the patient's report, the record); None: no input known (a scorer test)."""
    if inputs is None:
        return None
    out: set[str] = set()
    stack = [inputs]
    while stack:
        node = _json(stack.pop())
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            out |= _words(node)
    return out


def _unspecific(step: Step, words: set[str] | None) -> str | None:
    """Why a lookup's result grounds nothing (None: it may, or the call is no lookup): it lists
    more than :data:`MAX_LOOKUP_ENTRIES` entries, or its query shares no word with the input."""
    if step.name not in LOOKUP_TOOLS:
        return None
    args, result = _json(step.args), _json(step.result)
    query = args.get("query") if isinstance(args, dict) else args
    said = f"{step.name} call #{step.seq} (query {str(query)[:80]!r})"
    listed = max((len(v) for v in result.values() if isinstance(v, list)), default=0) \
        if isinstance(result, dict) else len(result) if isinstance(result, list) else 0
    if listed > MAX_LOOKUP_ENTRIES:
        return f"{said} listed {listed} entries (more than {MAX_LOOKUP_ENTRIES}): an over-broad query grounds nothing"
    if words is not None and not (_words(str(query)) & words) - NAMES_NOTHING:
        return (f"{said} shares no word with the case's input (a dose form or unit is no word of it): a lookup "
                "unrelated to it grounds nothing")
    return None


def _why_not(value: str, kind: str, use: Step | None, readers: list[Step], matchers: Matchers | None,
             broad: Mapping[int, str]) -> str:
    """Why ``value`` is ungrounded, for the reason (not part of the verdict)."""
    where = f"first used in {use.name} (call #{use.seq})" if use is not None else "in the final answer"
    if any(_found(value, [_evidence(s)], kind, matchers) for s in readers if s.ok and s.seq not in broad):
        return f"{where} before any tool result supplied it (looked up only afterwards)"
    named = [broad[s.seq] for s in readers if s.ok and s.seq in broad and _found(value, [_evidence(s)], kind, matchers)]
    if named:
        return f"{where}; only in a lookup that is no evidence: {named[0]}"
    if any(_found(value, [_evidence(s)], kind, matchers) for s in readers if s.ended is not None and not s.ok):
        return f"{where}; only an error result mentions it"
    return f"{where}; in no tool result"


def _refusals(refused: list[Any] | None) -> str:
    """The refused connections (model.RefusedConnection or its dict), said in a reason."""
    rows = [r.model_dump() if hasattr(r, "model_dump") else r for r in refused or []]
    rows = [r for r in rows if isinstance(r, dict)]
    if not rows:
        return ""
    first = rows[0]
    who = f"pid {first.get('pid')}" + (f" {first.get('command')!r}" if first.get("command") else "")
    return (f"; {len(rows)} connection(s) to its tools were refused ({first.get('reason')}: {who}"
            + (", ..." if len(rows) > 1 else "") + "): what they asked never ran")


def grounded(observed: list[Any] | None, values: dict[str, list[str]], *, offered: list[str] | None = None,
             refused: list[Any] | None = None,
             must_validate: str | None = None, answer_tool: str | None = None,
             max_repeats: int = DEFAULT_MAX_REPEATS, truncated: str | None = None,
             matchers: Matchers | None = None, writers: Iterable[str] = (),
             record_readers: Iterable[str] = (),
             task_checks: Callable[[list[Step]], list[Check]] | None = None,
             unparsed: str | None = None, inputs: Any = None) -> GroundingResult:
    """The ``grounded`` checks of one case from the harness's observed tool calls
    (``observed``: None when the agent was given no tools: not applicable; ``offered``: the
    tools it was given, for the reason). ``values``: kind -> the answer's values of that kind;
    kind ``code`` matches as a whole token, a kind in ``matchers`` (the task's
    ``grounding_matchers``: ``match(value, result_text)``) by its matcher, any other kind as
    text (ignoring case and spacing).
    ``truncated``: the observed log was cut to groundeval's bounds (``bounds.py``), so the
    case is not grounded (dropped calls could hold a repeat, a rebuild, the only lookups).
    ``writers``: tools whose calls are the answer (writes to the record): their successful
    calls' :func:`written_values` are checked as the answer's codes, and the first of them must
    follow a successful call of one of ``record_readers`` (the ``read`` check).
    ``task_checks``: the task's own checks of the observed calls (``Task.grounding_checks``:
    labs' ``looked``, what an abstention rests on). ``unparsed``: why the answer could not be
    read: nothing of it can be traced to a tool result, so it is not grounded (the ``answer``
    check), whatever the calls. ``inputs``: what the agent was given (the case's inputs), whose
    words a lookup's query must share (None: a lookup is judged by its size alone)."""
    if observed is None:
        return GroundingResult(applicable=False, reason=NOT_APPLICABLE)
    if truncated:
        check = Check("complete", False, f"the transcript was cut to groundeval's bounds ({truncated}); "
                      "grounding is not judged on part of a transcript")
        return GroundingResult(applicable=True, checks=[check], reason=check.reason)
    steps = _steps(observed)
    writes = set(writers)
    writers = {t for t in (must_validate, answer_tool) if t} | writes  # type: ignore[assignment]
    readers = [s for s in steps if s.name not in writers]  # whose results can be evidence
    words = input_words(inputs) if any(s.name in LOOKUP_TOOLS for s in readers) else None
    broad = {s.seq: u for s, u in ((s, _unspecific(s, words)) for s in readers) if u is not None}
    evidence = [s for s in readers if s.seq not in broad]
    written = [v for s in steps if s.name in writes and s.ok for v in written_values(s.args, s.result)]
    if written:
        values = {**values, "code": list(dict.fromkeys([*values.get("code", []), *written]))}
    checks = []
    if any(s.ok for s in steps):
        checks.append(Check("called", True, f"the harness observed {len(steps)} tool call(s), "
                            f"{sum(s.ok for s in steps)} successful" + _refusals(refused)))
    elif steps:  # an abstention ("no result", "nothing to do", []) decided on errors only
        checks.append(Check("called", False, f"the harness observed {len(steps)} tool call(s) and no call succeeded "
                            "(errors, raised or unfinished): the answer rests on nothing a tool returned"
                            + _refusals(refused)))
    else:
        given = f" ({', '.join(offered)})" if offered else ""
        checks.append(Check("called", False, f"the agent was given tools{given} and called none: "
                            "it answered from memory" + _refusals(refused)))
    ungrounded: dict[str, list[str]] = {}
    why: list[str] = []
    n = 0
    for kind, vals in values.items():
        for v in vals:
            if v is None or not str(v).strip():
                continue
            n += 1
            v = str(v)
            use = next((s for s in steps if s.name in writers and _found(v, [_args_text(s)], kind, matchers)), None)
            texts = [_evidence(s) for s in evidence if s.before(use)]
            if not _found(v, texts, kind, matchers):
                ungrounded.setdefault(kind, []).append(v)
                why.append(f"{kind} {v!r} {_why_not(v, kind, use, readers, matchers, broad)}")
    if ungrounded:
        checks.append(Check("values", False, "not from a successful tool result received before it was used: "
                            + "; ".join(why)))
    else:
        checks.append(Check("values", True, f"all {n} value(s) of the answer come from successful tool results "
                            "received before they were used"))
    if must_validate:
        checks.append(_validation(steps, must_validate, answer_tool))
    if task_checks is not None:
        checks.extend(task_checks(steps))
    if unparsed is not None:
        checks.append(Check("answer", False, f"the answer could not be read ({unparsed[:200]}): none of it can be "
                            "traced to a tool result"))
    first_write = next((s for s in steps if s.name in writes), None)
    if first_write is not None or (writes and record_readers):
        # the writes are the answer: the first of them, or (none written: "nothing to do") the
        # final answer, must follow a successful read of the record
        looked = [s for s in steps if s.name in set(record_readers) and s.before(first_write)]
        what = (f"the first write ({first_write.name}, call #{first_write.seq})" if first_write is not None
                else "the answer, with nothing written,")
        checks.append(Check("read", bool(looked), f"read the record ({', '.join(sorted({s.name for s in looked}))}) "
                            f"before {what.rstrip(',')}" if looked else
                            f"{what} came before any successful read of the record "
                            f"({', '.join(sorted(record_readers)) or 'no reader declared'}): decided from "
                            "nothing a tool returned"))
    checks.append(_repeats(steps, max_repeats))
    result = GroundingResult(applicable=True, checks=checks, ungrounded=ungrounded)
    result.reason = result.dimension().reason
    return result


__all__ = ["DEFAULT_MAX_REPEATS", "LOOKUP_TOOLS", "MAX_LOOKUP_ENTRIES", "NAME", "NOT_APPLICABLE", "GroundingResult",
           "Matchers", "grounded", "input_words", "no_tools", "written_values"]
