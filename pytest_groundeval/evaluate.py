"""Evaluating one case: load → agent call → parse → score, as a value.

Pure of pytest: the plugin's items only *report* what this returns, so agent calls can
later be run ahead of the items (concurrently) without touching the reporting side.
Every outcome is a value: ``passed`` / ``failed`` / ``error``, with a reason.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

from .agents.base import call_agent
from .datasets import CaseError, CaseRef
from .tasks.base import ParseError, Task


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def evaluate_case(task: Task, ref: CaseRef, agent: Any, scorer: Any = None) -> dict[str, Any]:
    """Run one case end to end and return its record entry (JSON-ready).

    ``scorer`` defaults to the task's own; a user may inject another through the fixture."""
    started = time.perf_counter()
    entry: dict[str, Any] = {
        "case_id": ref.case_id,
        "task": task.name,
        "outcome": "error",
        "content_hash": None,
        "ground_truth": None,
        "predicted": None,
        "raw_output": None,
        "score": None,
        "error": None,
        "duration_s": None,
        "usage": None,
    }
    try:
        case = task.load(ref)
        entry["content_hash"] = case.content_hash
        entry["ground_truth"] = case.truth
        try:
            output = call_agent(agent, task.name, case.prompt, case.inputs)
        except Exception as exc:  # the agent (or its API) failed: an error, not a wrong answer
            raise CaseError(f"agent {getattr(agent, 'name', agent)!r} raised {_error_text(exc)}") from exc
        entry["raw_output"] = output.text
        entry["usage"] = output.usage
        if output.transcript is not None:
            entry["transcript"] = output.transcript
            entry["steps"] = output.steps
        try:
            prediction = task.parse(output.text, output.resource)
        except ParseError as exc:
            # the model answered but not in the required form: a failed case (scored 0),
            # kept apart from errors (the case or the API could not be run at all)
            entry["outcome"] = "failed"
            entry["error"] = f"parse error: {exc}"
            entry["error_kind"] = "parse"
            return entry
        entry["predicted"] = prediction
        score = (scorer or task.score)(prediction, case)
        entry["score"] = score.to_dict()
        entry["outcome"] = "passed" if score.passed else "failed"
    except CaseError as exc:
        entry["error"] = str(exc)
        entry["error_kind"] = "agent" if exc.__cause__ is not None else "case"
    except Exception as exc:  # a bug in a task/scorer must not lose the case either
        entry["error"] = f"internal error: {_error_text(exc)}"
        entry["error_kind"] = "internal"
        entry["traceback"] = traceback.format_exc(limit=8)
    finally:
        entry["duration_s"] = round(time.perf_counter() - started, 6)
    return entry
