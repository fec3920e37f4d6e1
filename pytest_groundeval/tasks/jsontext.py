"""Finding JSON objects inside free text (model answers: bare, fenced, or amid prose)."""

from __future__ import annotations

import json
from typing import Any


def json_objects(text: str) -> list[dict[str, Any]]:
    """Every top-level JSON object in ``text``, in order (objects nested in one are not repeated)."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    i = text.find("{")
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        found.append(obj)
        i = text.find("{", end)
    return found


def json_kind(value: Any) -> str:
    """A JSON value's type, as a message names it, with the value (clipped)."""
    if value is None:
        return "null"
    name = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(type(value))
    if name is None:
        name = "a number" if isinstance(value, (int, float)) else type(value).__name__
    shown = repr(value)
    return f"{name} ({shown if len(shown) <= 60 else shown[:57] + '...'})"
