"""FHIR JSON primitive types, checked on the raw JSON a resource arrived as.

The fhir.resources (Pydantic) models coerce: ``"5"`` becomes the decimal 5, ``"1"`` the
positiveInt 1, ``"false"`` the boolean False, so a resource that validates may still not be
FHIR JSON. FHIR's JSON format has no such coercion: a decimal / integer is a JSON number, a
boolean is ``true`` / ``false``, every other primitive (string, code, uri, dateTime, ...) is a
JSON string, and an element that repeats is a JSON array.

:func:`json_type_issues` walks the raw dict alongside the R4B model classes and reads each
element's type from the model's own field annotations (``Annotated[Decimal, Decimal()]``,
``bool``, ``abc.QuantityType``, ``List[...]``), so every element of every data type is covered
without a hand-written list. Keys the model does not know are left to validation (which names
them); ``null`` is left to validation too.
"""

from __future__ import annotations

import functools
import math
import typing
from typing import Any

from pytest_groundeval.tasks.jsontext import json_kind

_INTEGER_KINDS = {"Integer", "PositiveInt", "UnsignedInt", "Integer64"}
_SKIP_FIELDS = {"fhir_comments"}


def _model_class(name: str) -> Any:
    from fhir.resources.R4B import get_fhir_model_class

    try:
        return get_fhir_model_class(name)
    except (KeyError, ValueError, AttributeError, ImportError):
        return None


def _strip_optional(annotation: Any) -> Any:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Union or type(annotation).__name__ == "UnionType":
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else None  # several non-null members: not an element type
    return annotation


def _element_type(annotation: Any) -> tuple[str, Any] | None:
    """What one JSON value of this annotation must be: ("boolean"|"integer"|"decimal"|"string",
    fhir type name), ("complex", model class), ("resource", None); None when unknown."""
    annotation = _strip_optional(annotation)
    if annotation is None:
        return None
    if annotation is bool:
        return ("boolean", "boolean")
    if typing.get_origin(annotation) is typing.Annotated:
        base, *meta = typing.get_args(annotation)
        kinds = [type(m).__name__ for m in meta]
        fhir_name = next((k for k in kinds if k not in ("EncodedBytes",)), getattr(base, "__name__", "string"))
        if base is bool:
            return ("boolean", "boolean")
        if any(k in _INTEGER_KINDS for k in kinds):
            return ("integer", fhir_name[:1].lower() + fhir_name[1:])
        if "Decimal" in kinds:
            return ("decimal", "decimal")
        return ("string", fhir_name[:1].lower() + fhir_name[1:])
    name = getattr(annotation, "__name__", "")
    if name.endswith("Type") and isinstance(annotation, type):
        target = name[: -len("Type")]
        if target == "Resource":
            return ("resource", None)
        cls = _model_class(target)
        return ("complex", cls) if cls is not None else None
    return None


@functools.lru_cache(maxsize=None)
def _fields(cls: Any) -> dict[str, tuple[bool, tuple[str, Any]]]:
    """alias -> (repeats, element type) for every field of a model class."""
    out: dict[str, tuple[bool, tuple[str, Any]]] = {}
    for name, info in cls.model_fields.items():
        if name in _SKIP_FIELDS:
            continue
        annotation = _strip_optional(info.annotation)
        if annotation is None:
            continue
        repeats = typing.get_origin(annotation) in (list, typing.List)
        if repeats:
            annotation = typing.get_args(annotation)[0]
        element = _element_type(annotation)
        if element is not None:
            out[info.alias or name] = (repeats, element)
    return out


_JSON_NAME = {"boolean": "true or false", "integer": "a JSON integer", "decimal": "a JSON number",
              "string": "a JSON string"}


def _primitive_ok(kind: str, value: Any) -> bool:
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "decimal":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return not isinstance(value, float) or math.isfinite(value)
    return isinstance(value, str)


def _walk(node: dict[str, Any], cls: Any, path: str, issues: list[str]) -> None:
    fields = _fields(cls)
    for key, value in node.items():
        if key == "resourceType" or key not in fields or value is None:
            continue
        repeats, (kind, detail) = fields[key]
        here = f"{path}.{key}" if path else key
        if repeats:
            if not isinstance(value, list):
                issues.append(f"{here}: {json_kind(value)}, but it repeats: FHIR JSON requires an array")
                continue
            items = [(f"{here}[{i}]", v) for i, v in enumerate(value)]
        else:
            if isinstance(value, list):
                issues.append(f"{here}: a list, but it does not repeat: FHIR JSON requires a single value")
                continue
            items = [(here, value)]
        for where, item in items:
            if item is None:  # null inside an array pairs with a primitive extension
                continue
            if kind == "complex":
                if isinstance(item, dict):
                    _walk(item, detail, where, issues)
                else:
                    issues.append(f"{where}: {json_kind(item)}, but {detail.__name__} is a JSON object")
            elif kind == "resource":
                if isinstance(item, dict):
                    rtype = item.get("resourceType")
                    target = _model_class(rtype) if isinstance(rtype, str) else None
                    if target is not None:
                        _walk(item, target, where, issues)
                else:
                    issues.append(f"{where}: {json_kind(item)}, but a resource is a JSON object")
            elif not _primitive_ok(kind, item):
                issues.append(f"{where}: {json_kind(item)}, but FHIR {detail} must be {_JSON_NAME[kind]}")


def json_type_issues(resource: Any, resource_type: str = "MedicationStatement") -> list[str]:
    """Every element of ``resource`` (a raw JSON dict) whose JSON type its FHIR R4B type forbids:
    a numeric string for a decimal or integer, ``"false"`` for a boolean, a number for a string
    or code, a decimal for an integer, a single value for a repeating element (or the reverse).
    Each issue names the element's path and what it must be."""
    if not isinstance(resource, dict):
        return []
    rtype = resource.get("resourceType")
    cls = _model_class(rtype if isinstance(rtype, str) else resource_type) or _model_class(resource_type)
    issues: list[str] = []
    if cls is not None:
        try:
            _walk(resource, cls, "", issues)
        except RecursionError:
            issues.append("the resource is nested too deeply to read its types")
    return issues


__all__ = ["json_type_issues"]
