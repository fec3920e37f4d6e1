"""The fhir-core upstream proposal of FRICTION.md B, measured: what ``Bundle.model_validate``
would cost if fhir-core computed each model class's facts once per class instead of on every
model instance, and proof that the results are the same.

fhir-core 1.1.x runs two Python model validators on every model instance
(``FHIRAbstractModel.reject_null_complex_elements`` and
``validate_after_model_construction``); each re-derives facts that are fixed per class (its
complex list fields; its required primitive fields and their aliases; its choice groups) by
walking ``model_fields`` again. This script times ``Bundle.model_validate`` on every committed
Synthea fixture with fhir-core as released, then swaps, in this process only, the code of those
two validators for versions that keep the same checks and messages but cache the per-class
facts, and times it again, side by side (alternating, best of ``--reps``), then swaps fhir-core's code back.

Equivalence: every fixture's validated Bundle (``model_dump_json``) and the ``ValidationError``
text of a set of invalid bundles (a null entry, a null in a complex list, a missing required
``status``, a missing required choice ``medication[x]``, two values for one choice, a missing
required ``Coding``-free ``subject``) must be identical before and after; the script exits 1
if not. groundeval never does this swap: its verdicts are fhir.resources' own. This is the
reproducer for the upstream issue, and the number behind issue 17's cold floor.

Usage: uv run python scripts/bench_fhir_core_validators.py [--reps 5] [--fixtures DIR]
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import orjson
from fhir.resources.R4B.bundle import Bundle
from fhir_core import fhirabstractmodel as fam
from fhir_core.utils import is_list_type, is_primitive_type
from pydantic import ValidationError
from pydantic_core import PydanticCustomError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "synthea"

_NULLABLE: dict = {}
_REQUIRED: dict = {}


def _nullable_lists(cls):
    facts = _NULLABLE.get(cls)
    if facts is None:
        facts = _NULLABLE[cls] = [(name, field.alias) for name, field in cls.model_fields.items()
                                  if is_list_type(field) and not is_primitive_type(field) and not name.endswith("__ext")]
    return facts


def _class_facts(cls, instance):
    facts = _REQUIRED.get(cls)
    if facts is None:
        aliases = cls.get_alias_mapping()
        required = [(aliases[name], ext, cls.model_fields[aliases[name]].alias) for name, ext in instance.get_required_fields()]
        choices = [(fields, cls.model_fields[fields[0]].json_schema_extra["one_of_many_required"] is True)
                   for fields in instance.get_one_of_many_fields().values()]
        facts = _REQUIRED[cls] = (required, choices)
    return facts


def cached_reject_null_complex_elements(cls, data):  # same checks and message as fhir-core's
    if not isinstance(data, dict):
        return data
    errors = []
    for name, alias in _nullable_lists(cls):
        key = alias if alias and alias in data else name
        value = data.get(key)
        if isinstance(value, list) and any(item is None for item in value):
            errors.append({"type": PydanticCustomError("list_type", "None is not allowed as an element of {field}",
                                                       {"field": key}), "loc": (key,), "input": value})
    if errors:
        raise ValidationError.from_exception_data(cls.__name__, errors)
    return data


def cached_validate_after_model_construction(self):  # same checks, order and messages as fhir-core's
    cls = self.__class__
    required, choices = _class_facts(cls, self)
    missing = object()
    errors = []
    for key, ext, alias in required:
        value = getattr(self, key, missing)
        if value not in (missing, None):
            continue
        ext_value = getattr(self, ext, missing) if ext is not None else None
        missing_ext = True
        if ext_value not in (missing, None):
            if isinstance(ext_value, dict):
                missing_ext = len(ext_value.get("extension", [])) == 0
            elif ext_value.extension and len(ext_value.extension) > 0:
                missing_ext = False
        if missing_ext:
            errors.append({"type": PydanticCustomError("model_field_validation.missing",
                                                       "Value for the field '{field_name}' is required.",
                                                       {"field_name": alias}), "loc": (alias,), "input": value})
    if errors:
        raise ValidationError.from_exception_data(cls.__name__, errors)
    for fields, is_required in choices:
        found = False
        for field in fields:
            if getattr(self, field, None) is not None:
                if found:
                    raise ValueError(f"Any of one field value is expected from this list {fields}, but got multiple!")
                found = True
        if is_required and not found:
            raise ValueError(f"Expect any of field value from this list {fields}.")
    return self


_RELEASED: dict = {}


def use_cached_validators(on: bool) -> None:
    """pydantic-core holds the validator functions it was built with: swap their code in place
    (and back: ``on=False`` restores fhir-core's own code)."""
    for name, replacement, helpers in (
        ("reject_null_complex_elements", cached_reject_null_complex_elements, {"_nullable_lists": _nullable_lists}),
        ("validate_after_model_construction", cached_validate_after_model_construction, {"_class_facts": _class_facts}),
    ):
        fn = fam.FHIRAbstractModel.__dict__[name]
        fn = getattr(fn, "__func__", fn)
        _RELEASED.setdefault(name, fn.__code__)
        fn.__globals__.update(helpers, PydanticCustomError=PydanticCustomError, ValidationError=ValidationError)
        fn.__code__ = replacement.__code__ if on else _RELEASED[name]


def invalid_bundles(bundles: list[dict]) -> list[dict]:
    base = next(b for b in bundles if any(e["resource"]["resourceType"] == "MedicationRequest" for e in b["entry"]))
    index = next(i for i, e in enumerate(base["entry"]) if e["resource"]["resourceType"] == "MedicationRequest")

    def mutate(edit):
        b = copy.deepcopy(base)
        edit(b["entry"][index]["resource"], b)
        return b

    return [
        mutate(lambda r, b: b["entry"].append(None)),
        mutate(lambda r, b: r.__setitem__("dosageInstruction", [None])),
        mutate(lambda r, b: r.pop("status")),
        mutate(lambda r, b: (r.pop("medicationCodeableConcept", None), r.pop("medicationReference", None))),
        mutate(lambda r, b: r.__setitem__("medicationReference", {"reference": "Medication/x"})),
        mutate(lambda r, b: r.pop("subject")),
    ]


def outcomes(bundles: list[dict], invalid: list[dict]) -> list[str]:
    out = [Bundle.model_validate(b).model_dump_json() for b in bundles]
    for b in invalid:
        try:
            Bundle.model_validate(b)
            out.append("accepted")
        except ValidationError as e:
            out.append(str(e))
    return out


def timed(bundles: list[dict]) -> float:
    t = time.perf_counter()
    for b in bundles:
        Bundle.model_validate(b)
    return (time.perf_counter() - t) / len(bundles)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--fixtures", type=Path, default=FIXTURES, help="a folder of Bundle JSON files (default: fixtures/synthea)")
    a = p.parse_args(argv)
    bundles = [orjson.loads(f.read_bytes()) for f in sorted(a.fixtures.glob("*.json"))]
    invalid = invalid_bundles(bundles)
    released_out = outcomes(bundles, invalid)
    if "accepted" in released_out[len(bundles):]:
        print("an invalid bundle was accepted by fhir-core as released: the check set is wrong", file=sys.stderr)
        return 1
    released, cached = [], []
    for _ in range(a.reps):  # paired: released and cached alternate in one process
        use_cached_validators(False)
        released.append(timed(bundles))
        use_cached_validators(True)
        cached.append(timed(bundles))
    cached_out = outcomes(bundles, invalid)
    use_cached_validators(False)
    if outcomes(bundles, invalid) != released_out:
        print("restoring fhir-core's own validators did not restore its outcomes", file=sys.stderr)
        return 1
    same = cached_out == released_out
    r, c = min(released), min(cached)
    print(f"Bundle.model_validate over {len(bundles)} Synthea fixtures, best of {a.reps}: fhir-core as released "
          f"{r * 1e6:.0f} µs/bundle, per-class facts cached {c * 1e6:.0f} µs/bundle: {c / r:.2f}x")
    print(f"identical outcomes ({len(bundles)} validated Bundles dumped, {len(invalid)} invalid bundles' errors): {same}")
    if not same:
        for i, (x, y) in enumerate(zip(released_out, cached_out)):
            if x != y:
                print(f"  differs at {i}: released {x[:200]!r} / cached {y[:200]!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
