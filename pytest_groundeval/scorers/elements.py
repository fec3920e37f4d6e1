"""Default deny over a FHIR resource's elements: what a scorer did not verify cannot pass.

A task declares an :class:`ElementSchema` for each resource type it scores: the elements it
verifies against the truth, the elements that say nothing clinical (ids, ``meta``, the
resource's own identifiers, ``text.status``, ...), and the free-text elements it reads for
claims that must agree with the structure. :func:`unverified` walks every leaf of the
resource and names each one that none of the three covers; :func:`unverified_check` turns
that into a failing :class:`Check` with ``unverified element: <path>``.

Paths are dotted element names with list positions dropped for matching
(``dosage[0].doseAndRate[1].doseQuantity.value`` matches ``dosage.doseAndRate.doseQuantity.value``)
and kept in what is reported. A pattern covers an element and everything under it; a segment
``*`` matches any one element name (``extension.*``), and a pattern ending in ``.**`` is the
same as the pattern without it (said for the reader). Patterns never match by string prefix:
``code`` covers ``code.coding.system`` but not ``codeFoo``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from pytest_groundeval.scorers.base import Check


def _split(pattern: str) -> tuple[str, ...]:
    parts = tuple(p for p in pattern.split(".") if p)
    if parts and parts[-1] == "**":
        parts = parts[:-1]
    if not parts:
        raise ValueError(f"empty element pattern {pattern!r}")
    return parts


@dataclass(frozen=True)
class ElementSchema:
    """The elements of one resource type a task accounts for; every other element fails.

    ``verified``: checked against the truth by the scorer (it must really check each one:
    a pattern here is a promise, see the task's tests). ``inert``: says nothing clinical.
    ``text``: free text the scorer reads for claims (drugs, doses, statuses, tests, ...)."""

    resource_type: str
    verified: tuple[str, ...]
    inert: tuple[str, ...] = ()
    text: tuple[str, ...] = ()
    _compiled: tuple[tuple[tuple[str, ...], str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        compiled = [(_split(p), "verified") for p in self.verified]
        compiled += [(_split(p), "inert") for p in self.inert]
        compiled += [(_split(p), "text") for p in self.text]
        object.__setattr__(self, "_compiled", tuple(compiled))

    def role(self, names: tuple[str, ...]) -> str | None:
        """``verified``, ``inert``, ``text`` or None (unaccounted) for an element's name path.
        The most specific (longest) matching pattern wins, so ``text`` may be inert while
        ``text.div`` is read."""
        best: tuple[int, str] | None = None
        for parts, role in self._compiled:
            if len(parts) <= len(names) and all(p == "*" or p == n for p, n in zip(parts, names)):
                if best is None or len(parts) > best[0]:
                    best = (len(parts), role)
        return best[1] if best else None


def leaves(node: Any, path: str = "", names: tuple[str, ...] = ()) -> Iterator[tuple[str, tuple[str, ...], Any]]:
    """Every leaf of a JSON value as (reported path, name path, value). An empty object or
    list is a leaf of its own (it is present, and says nothing verified)."""
    if isinstance(node, dict):
        if not node and path:
            yield path, names, node
        for key, value in node.items():
            yield from leaves(value, f"{path}.{key}" if path else str(key), names + (str(key),))
    elif isinstance(node, list):
        if not node and path:
            yield path, names, node
        for i, value in enumerate(node):
            yield from leaves(value, f"{path}[{i}]", names)
    else:
        yield path, names, node


def unverified(resource: dict[str, Any], schema: ElementSchema) -> list[str]:
    """The reported paths of every leaf the schema does not account for (``resourceType``
    is always accounted for: it is what selected the schema)."""
    out: list[str] = []
    for path, names, _value in leaves(resource):
        if names == ("resourceType",):
            continue
        if schema.role(names) is None:
            out.append(path)
    return out


def text_elements(resource: dict[str, Any], schema: ElementSchema) -> list[tuple[str, str]]:
    """(path, text) of every string leaf the schema declares as free text to be read."""
    return [(path, value) for path, names, value in leaves(resource)
            if isinstance(value, str) and schema.role(names) == "text"]


def unverified_check(resource: dict[str, Any], schema: ElementSchema, *, name: str = "verified_elements",
                     limit: int = 5) -> Check:
    """A check that fails naming each unaccounted element (``unverified element: <path>``)."""
    paths = unverified(resource, schema)
    if not paths:
        return Check(name, True, f"every element of the {schema.resource_type} is verified, inert or read")
    shown = "; ".join(f"unverified element: {p}" for p in paths[:limit])
    more = f" (+{len(paths) - limit} more)" if len(paths) > limit else ""
    return Check(name, False, shown + more)
