"""Finding JSON objects inside free text (model answers: bare, fenced, or amid prose)."""

from __future__ import annotations

import json
from typing import Any


#: "{" that start no JSON object, at most, before the text is not read further: each failed
#: attempt costs a scan up to its position (``JSONDecodeError`` counts the lines before it), so a
#: megabyte of "{" would take minutes; no answer a model writes has hundreds of them
MAX_FAILED_STARTS = 200


class UnreadableJson(ValueError):
    """The text cannot be searched for JSON objects within bounds (see :func:`json_objects`)."""


def json_objects(text: str) -> list[dict[str, Any]]:
    """Every top-level JSON object in ``text``, in order (objects nested in one are not repeated).

    :class:`UnreadableJson` for a text with more than :data:`MAX_FAILED_STARTS` "{" that start
    no object, or with JSON the decoder cannot read (nested past the recursion limit, an integer
    of more digits than Python converts): it is an object no reader can take or leave out."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
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
