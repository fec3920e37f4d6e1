"""A tool-call log as the runner records it, for scorer tests of ``grounded``."""

from __future__ import annotations


def log(*calls) -> list[dict]:
    """Calls (name, args, result[, status]) one after another, each a step apart."""
    out = []
    for i, c in enumerate(calls):
        name, args, result, status = (*c, "ok") if len(c) == 3 else c
        out.append({"seq": i + 1, "tool": name, "args": args, "result": result, "status": status,
                    "step": 2 * i + 2, "started": 2 * i + 1, "ended": 2 * i + 2})
    return out
