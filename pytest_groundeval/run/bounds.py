"""What one case may store of its agent's output: bounded depth, size and item count.

Applied once, where an agent's output enters the harness (``runner._take_output``), so
the record, the journal, the xdist report, LangSmith and the HTML report all see the
same bounded value. Nothing an agent returns can crash the session (pydantic and orjson
refuse JSON nested deeper than about 255 levels) or make a run hold and write a 50 MB
answer several times over.

The caps (characters of JSON text, counted as they are kept):

* the answer text (``raw_output``): :data:`MAX_TEXT` characters;
* the structured answer: nested at most :data:`MAX_DEPTH` levels, at most
  :data:`MAX_ITEMS` items in any list or object, :data:`MAX_STRUCTURED` characters;
* the transcript: at most :data:`MAX_STEPS` steps, each step (a tool result, a message)
  :data:`MAX_STEP` characters and :data:`MAX_DEPTH` levels, :data:`MAX_TRANSCRIPT` in all;
* usage: :data:`MAX_USAGE` characters and :data:`MAX_USAGE_DEPTH` levels (beyond: not
  token counts, dropped with a warning); the model's name: :data:`MAX_NAME` characters.

What is cut is marked where it was cut (a string ends with ``[groundeval: truncated ...]``,
a container too deep becomes such a string, a long list or object gets one more item or
key saying how many were dropped, dropped steps are one last step of type
``groundeval``), and :attr:`Bounded.cuts` says what, for ``CaseResult.truncated``.

An answer that was cut is never scored (``runner``: an ``agent`` error): a cut answer can
score better than the whole (a cut list loses its wrong codes and raises precision; a cut
text loses a second, contradicting JSON answer). A cut transcript keeps the answer
scored, but the case is not ``grounded`` (the dropped steps could hold a repeat or a
rebuild after validation).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from pytest_groundeval.model import AgentOutput

MAX_DEPTH = 64
MAX_ITEMS = 10_000
MAX_TEXT = 1 << 20  # 1 MiB of answer text
MAX_STRUCTURED = 1 << 20
MAX_STEPS = 500
MAX_STEP = 64 << 10  # 64 KiB per transcript step (a tool result, a message)
MAX_TRANSCRIPT = 2 << 20
MAX_USAGE = 16 << 10
MAX_USAGE_DEPTH = 4
MAX_NAME = 256
MAX_CUTS = 20  # cuts listed per case (then "and N more")

TAG = "[groundeval: truncated"
TRANSCRIPT_CUT = "transcript_truncated"  # AgentOutput.extra: the transcript's first cut (grounding reads it)
INT_RANGE = 1 << 63  # JSON writers refuse integers outside 64 bits


def _marker(what: str) -> str:
    return f"{TAG}: {what}]"


def _short_path(path: str) -> str:
    return path if len(path) <= 120 else path[:60] + "…" + path[-59:]


class _Walk:
    """One bounded copy of a JSON-like value: depth, items per container, total size."""

    def __init__(self, size: int, depth: int = MAX_DEPTH, items: int = MAX_ITEMS) -> None:
        self.left = size
        self.depth = depth
        self.items = items
        self.cuts: list[str] = []

    def cut(self, path: str, what: str) -> None:
        self.cuts.append(f"{_short_path(path)}: {what}")

    def value(self, v: Any, path: str, level: int = 0) -> Any:
        if isinstance(v, str):
            return self.text(v, path)
        if v is None or isinstance(v, (bool, float)):
            self.left -= 5
            return v
        if isinstance(v, int):
            if not -INT_RANGE <= v < INT_RANGE:
                self.cut(path, "an integer outside 64 bits, kept as text")
                return self.text(str(v), path)
            self.left -= 8
            return v
        if isinstance(v, (dict, list, tuple)):
            if level >= self.depth:
                self.cut(path, f"nested deeper than {self.depth} levels")
                self.left -= 60
                return _marker(f"nested deeper than {self.depth} levels")
            if isinstance(v, dict):
                return self.mapping(v, path, level)
            return self.sequence(v, path, level)
        return v  # not JSON (the task decides what it means); the record writes it as text

    def text(self, s: str, path: str) -> str:
        if len(s) + 2 <= self.left:
            self.left -= len(s) + 2
            return s
        keep = max(0, self.left - 2)
        self.left = 0
        self.cut(path, f"{len(s)} characters, kept {keep}")
        return s[:keep] + _marker(f"{len(s) - keep} more characters")

    def sequence(self, v: list | tuple, path: str, level: int) -> list:
        out = []
        for i, item in enumerate(v):
            if i >= self.items or self.left <= 0:
                why = f"more than {self.items} items" if i >= self.items else "size limit reached"
                self.cut(path, f"{len(v)} items, kept {i} ({why})")
                out.append(_marker(f"{len(v) - i} more items"))
                break
            self.left -= 1
            out.append(self.value(item, f"{path}[{i}]", level + 1))
        return out

    def mapping(self, v: dict, path: str, level: int) -> dict:
        out: dict[Any, Any] = {}
        for i, (k, item) in enumerate(v.items()):
            if i >= self.items or self.left <= 0:
                why = f"more than {self.items} keys" if i >= self.items else "size limit reached"
                self.cut(path, f"{len(v)} keys, kept {i} ({why})")
                out["groundeval_truncated"] = _marker(f"{len(v) - i} more keys")
                break
            key = k
            if isinstance(k, str) and len(k) > MAX_NAME:
                key = k[:MAX_NAME] + _marker(f"{len(k) - MAX_NAME} more characters")
                self.cut(f"{path}.<key>", f"a key of {len(k)} characters")
            self.left -= len(str(key)) + 4 if isinstance(key, str) else 12
            out[key] = self.value(item, f"{path}.{key}" if isinstance(key, str) else f"{path}[{key!r}]", level + 1)
        return out


def bound(value: Any, size: int, path: str, *, depth: int = MAX_DEPTH) -> tuple[Any, list[str]]:
    """``value`` within ``size`` characters and ``depth`` levels, and what was cut."""
    walk = _Walk(size, depth)
    kept = walk.value(value, path)
    return kept, walk.cuts


def too_deep(value: Any, depth: int = MAX_DEPTH) -> bool:
    """Is ``value`` nested deeper than ``depth`` levels (stops looking there)?"""
    stack = [(value, 0)]
    while stack:
        v, level = stack.pop()
        if isinstance(v, dict):
            v = list(v.values())
        elif not isinstance(v, (list, tuple)):
            continue
        if level >= depth:
            return True
        stack.extend((item, level + 1) for item in v)
    return False


@dataclass
class Bounded:
    """An agent's output within the caps; ``cuts`` says what was cut (empty: nothing)."""

    output: AgentOutput
    cuts: list[str] = field(default_factory=list)
    answer_cut: bool = False  # the text or the structured answer: the case is not scored
    transcript_cut: bool = False  # the case is not grounded
    usage_problem: str | None = None  # usage beyond its caps: dropped (not token counts)

    @property
    def listed(self) -> list[str]:
        """The cuts for the record: the first :data:`MAX_CUTS` of each part (answer text,
        structured answer, transcript, model), then how many more."""
        out: list[str] = []
        per_part: dict[str, int] = {}
        for cut in self.cuts:
            part = _part(cut)
            per_part[part] = per_part.get(part, 0) + 1
            if per_part[part] <= MAX_CUTS:
                out.append(cut)
        out += [f"{part}: and {n - MAX_CUTS} more cuts" for part, n in per_part.items() if n > MAX_CUTS]
        return out


def _part(cut: str) -> str:
    head = cut.split(":", 1)[0]
    for part in ("raw_output", "structured_output", "transcript", "model"):
        if head.startswith(part):
            return part
    return head


def bound_output(output: AgentOutput) -> Bounded:
    """The output as a case may store it (see the module's docstring for the caps)."""
    cuts: list[str] = []
    changes: dict[str, Any] = {}
    answer_cut = transcript_cut = False
    if isinstance(output.text, str) and len(output.text) > MAX_TEXT:
        changes["text"] = output.text[:MAX_TEXT] + _marker(f"{len(output.text) - MAX_TEXT} more characters")
        cuts.append(f"raw_output: {len(output.text)} characters, kept {MAX_TEXT}")
        answer_cut = True
    if output.structured is not None:
        kept, found = bound(output.structured, MAX_STRUCTURED, "structured_output")
        if found:
            changes["structured"], answer_cut = kept, True
            cuts += found
    if isinstance(output.transcript, list):
        kept_steps, found = _bound_transcript(output.transcript)
        if found:
            changes["transcript"], transcript_cut = kept_steps, True
            changes["extra"] = {**(output.extra or {}), TRANSCRIPT_CUT: found[0]}
            cuts += found
    if isinstance(output.model, str) and len(output.model) > MAX_NAME:
        changes["model"] = output.model[:MAX_NAME] + _marker(f"{len(output.model) - MAX_NAME} more characters")
        cuts.append(f"model: {len(output.model)} characters, kept {MAX_NAME}")
    usage_problem = usage_beyond(output.usage)
    if changes:
        output = dataclasses.replace(output, **changes)
    return Bounded(output, cuts, answer_cut=answer_cut, transcript_cut=transcript_cut, usage_problem=usage_problem)


def usage_beyond(usage: Any) -> str | None:
    """Why ``usage`` is beyond what token counts can be (None: within the caps)."""
    if usage is None:
        return None
    _, found = bound(usage, MAX_USAGE, "usage", depth=MAX_USAGE_DEPTH)
    return f"beyond groundeval's bounds ({found[0]})" if found else None


def _bound_transcript(steps: list[Any]) -> tuple[list[Any], list[str]]:
    kept: list[Any] = []
    cuts: list[str] = []
    left = MAX_TRANSCRIPT
    for i, step in enumerate(steps):
        if i >= MAX_STEPS or left <= 0:
            why = f"more than {MAX_STEPS} steps" if i >= MAX_STEPS else f"{MAX_TRANSCRIPT} characters in all"
            cuts.append(f"transcript: {len(steps)} steps, kept {i} ({why})")
            kept.append({"type": "groundeval", "truncated": _marker(f"{len(steps) - i} more steps dropped ({why})")})
            break
        walk = _Walk(min(MAX_STEP, left))
        kept.append(walk.value(step, f"transcript[{i}]"))
        left -= min(MAX_STEP, left) - walk.left
        cuts += walk.cuts
    return kept, cuts


def answer_was_cut(result: Any) -> bool:
    """Did a stored case's answer (its text or structured answer) get cut? (never re-scored)"""
    return any(c.startswith(("raw_output", "structured_output")) for c in getattr(result, "truncated", None) or [])


__all__ = ["MAX_DEPTH", "MAX_ITEMS", "MAX_STEP", "MAX_STEPS", "MAX_STRUCTURED", "MAX_TEXT", "MAX_TRANSCRIPT",
           "TAG", "TRANSCRIPT_CUT", "Bounded", "answer_was_cut", "bound", "bound_output", "too_deep", "usage_beyond"]

