"""hc_tools: lookup, build and validate, including the failures an agent must be able to read."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from fhir.resources.R4B.medicationstatement import MedicationStatement

from pytest_groundeval.fhir import hc_tools
from pytest_groundeval.fhir.hc_tools import (
    Catalog,
    build_medication_statement,
    langchain_tools,
    load_catalog,
    lookup_medication_code,
    set_catalog,
    validate_medication_statement,
)

REPO = Path(__file__).resolve().parents[2]
CATALOG_PATH = REPO / "fixtures" / "terminology" / "rxnorm.json"
RXNORM = "http://www.nlm.nih.gov/research/umls/rxnorm"
UCUM = "http://unitsofmeasure.org"


def top(query, n=1, **kw):
    return [m["code"] for m in lookup_medication_code(query, **kw)["matches"][:n]]


def assert_valid(resource):
    report = validate_medication_statement(resource)
    assert report == {"valid": True, "issues": []}, report
    MedicationStatement.model_validate(resource)
    json.dumps(resource)  # JSON-serialisable as returned


def build(**overrides):
    args = dict(subject="Patient/pat-003", status="active", rxnorm_code="310965",
                display="Ibuprofen 200 MG Oral Tablet")
    args.update(overrides)
    return build_medication_statement(**args)


# ---------------------------------------------------------------- lookup


def test_lookup_result_shape():
    result = lookup_medication_code("ibuprofen 200 mg")
    assert result["query"] == "ibuprofen 200 mg"
    first = result["matches"][0]
    assert set(first) == {"code", "display", "system", "score"}
    assert first == {"code": "310965", "display": "Ibuprofen 200 MG Oral Tablet", "system": RXNORM, "score": 1.0}
    json.dumps(result)


@pytest.mark.parametrize(
    "query,code",
    [
        ("metoprolol 25 mg er", "866427"),
        ("ER metoprolol 25 MG", "866427"),
        ("metoprolol succinate extended-release 25 mg tablet", "866427"),
        ("metoprolol succinate XL 100mg", "866412"),
        ("24 hr metoprolol 100", "866412"),
        ("metoprolol 25 mg IR", "866924"),
        ("metoprolol tartrate 25", "866924"),
        ("Toprol XL 100 mg", "866414"),
        ("tylenol", "209387"),
        ("TYLENOL 325 MG", "209387"),
        ("acetaminophen 325 mg tablet", "313782"),
        ("APAP 325 tab", "313782"),
        ("HCTZ 25 mg tab", "310798"),
        ("ASA 81", "243670"),
        ("81 mg aspirin", "243670"),
        ("amoxicillin 0.5 g", "308192"),
        ("amoxicillin 250 mg cap", "308182"),
        ("digoxin 125 mcg", "197604"),
        ("fluticasone 44 mcg inhaler", "895994"),
        ("memantine oral soln", "996740"),
        ("memantine 10 mg/5 mL", "996740"),
        ("metformin ER 500", "860975"),
        ("metformin 500 mg tab", "861007"),
        ("Klonopin", "1153378"),
        ("Aricept 23", "998582"),
        ("chewable acetaminophen 160", "313820"),
    ],
)
def test_lookup_ranks_the_right_product_first(query, code):
    assert top(query) == [code]


def test_lookup_strength_disambiguation_puts_100_below_25():
    codes = [m["code"] for m in lookup_medication_code("metoprolol 25 mg er", 5)["matches"]]
    assert codes.index("866427") < codes.index("866412")


def test_lookup_full_matches_rank_before_partial_matches():
    matches = lookup_medication_code("ibuprofen 200 mg", 5)["matches"]
    assert matches[0]["score"] == 1.0
    assert all(m["score"] < 1.0 for m in matches[1:])
    assert [m["score"] for m in matches] == sorted((m["score"] for m in matches), reverse=True)


def test_lookup_is_case_and_order_insensitive():
    assert top("Tablet 200 MG IBUPROFEN oral") == top("ibuprofen 200 mg oral tablet") == ["310965"]


@pytest.mark.parametrize("query", ["", "   ", "xyzzy plugh", "the of and", "???", "mg tablet oral"])
def test_lookup_nonsense_gives_no_matches(query):
    assert lookup_medication_code(query)["matches"] == []


def test_lookup_limit():
    assert len(lookup_medication_code("metoprolol", limit=2)["matches"]) == 2
    assert len(lookup_medication_code("metoprolol")["matches"]) <= 5
    assert "error" in lookup_medication_code("metoprolol", limit=0)
    assert lookup_medication_code("metoprolol", limit=0)["matches"] == []


def test_lookup_bad_arguments_come_back_as_values():
    result = lookup_medication_code(None)
    assert result["matches"] == [] and "error" in result
    result = lookup_medication_code("aspirin", catalog="/nonexistent/catalog.json")
    assert result["matches"] == [] and "catalog" in result["error"]


def test_explicit_catalog_and_set_catalog(tmp_path):
    entries = [{"code": "1", "display": "Foozamide 5 MG Oral Tablet", "system": RXNORM}]
    assert top("foozamide", catalog=Catalog(entries)) == ["1"]
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(entries))
    assert top("foozamide", catalog=str(path)) == ["1"]
    assert len(load_catalog(path)) == 1
    try:
        set_catalog(path)
        assert top("foozamide") == ["1"]
        assert top("ibuprofen") == []
    finally:
        set_catalog(None)
    assert top("ibuprofen 200") == ["310965"]
    assert top("foozamide") == []


# ---------------------------------------------------------------- build


def test_build_basic_regimen():
    result = build(dose_value=400, dose_unit="mg", frequency_per_day=3, as_needed=False)
    assert set(result) == {"resource"}
    r = result["resource"]
    assert r["resourceType"] == "MedicationStatement"
    assert r["status"] == "active"
    assert r["subject"] == {"reference": "Patient/pat-003"}
    assert r["medicationCodeableConcept"]["coding"] == [
        {"system": RXNORM, "code": "310965", "display": "Ibuprofen 200 MG Oral Tablet"}
    ]
    assert "id" not in r
    (dosage,) = r["dosage"]
    assert dosage["doseAndRate"] == [{"doseQuantity": {"value": 400, "unit": "mg", "system": UCUM, "code": "mg"}}]
    assert dosage["timing"] == {"repeat": {"frequency": 3, "period": 1, "periodUnit": "d"}}
    assert dosage["asNeededBoolean"] is False
    assert_valid(r)


@pytest.mark.parametrize(
    "per_day,per_day_max,repeat",
    [
        (1, None, {"frequency": 1, "period": 1, "periodUnit": "d"}),
        (4, None, {"frequency": 4, "period": 1, "periodUnit": "d"}),
        (0.5, None, {"frequency": 1, "period": 2, "periodUnit": "d"}),
        (1 / 7, None, {"frequency": 1, "period": 1, "periodUnit": "wk"}),
        (0.142857, None, {"frequency": 1, "period": 1, "periodUnit": "wk"}),
        (1 / 3, None, {"frequency": 1, "period": 3, "periodUnit": "d"}),
        (1.5, None, {"frequency": 3, "period": 2, "periodUnit": "d"}),
        (4, 6, {"frequency": 4, "frequencyMax": 6, "period": 1, "periodUnit": "d"}),
        (2, 2, {"frequency": 2, "period": 1, "periodUnit": "d"}),
    ],
)
def test_build_frequency_to_timing(per_day, per_day_max, repeat):
    result = build(dose_value=200, dose_unit="mg", frequency_per_day=per_day, frequency_per_day_max=per_day_max)
    assert result["resource"]["dosage"][0]["timing"]["repeat"] == repeat
    assert_valid(result["resource"])


def test_build_dose_range_and_prn():
    result = build_medication_statement(
        "Patient/pat-025", "active", "313782", "Acetaminophen 325 MG Oral Tablet",
        dose_value=325, dose_unit="mg", dose_value_max=650,
        frequency_per_day=4, frequency_per_day_max=6, as_needed=True,
    )
    (dosage,) = result["resource"]["dosage"]
    assert dosage["doseAndRate"] == [{"doseRange": {
        "low": {"value": 325, "unit": "mg", "system": UCUM, "code": "mg"},
        "high": {"value": 650, "unit": "mg", "system": UCUM, "code": "mg"},
    }}]
    assert dosage["asNeededBoolean"] is True
    assert dosage["timing"]["repeat"]["frequencyMax"] == 6
    assert_valid(result["resource"])


@pytest.mark.parametrize("value,unit", [(0.5, "g"), (5, "mL"), (88, "ug"), (0.125, "mg")])
def test_build_ucum_units(value, unit):
    result = build(dose_value=value, dose_unit=unit, frequency_per_day=2)
    q = result["resource"]["dosage"][0]["doseAndRate"][0]["doseQuantity"]
    assert q == {"value": value, "unit": unit, "system": UCUM, "code": unit}
    assert_valid(result["resource"])


def test_build_without_dosage_and_with_note():
    result = build(status="not-taken", note_text="Patient denies NSAID use.")
    r = result["resource"]
    assert "dosage" not in r
    assert r["note"] == [{"text": "Patient denies NSAID use."}]
    assert_valid(r)


@pytest.mark.parametrize("status", ["active", "completed", "entered-in-error", "intended", "stopped", "on-hold", "unknown", "not-taken"])
def test_build_every_r4b_status(status):
    assert_valid(build(status=status)["resource"])


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        ({"status": "recorded"}, "recorded"),
        ({"status": "draft"}, "status"),
        ({"status": "Active"}, "status"),
        ({"dose_value": 400, "dose_unit": "tablet"}, "tablet"),
        ({"dose_value": 400, "dose_unit": "mcg"}, "'ug'"),
        ({"dose_value": 400, "dose_unit": "MG"}, "'mg'"),
        ({"dose_value": 5, "dose_unit": "ml"}, "'mL'"),
        ({"dose_value": 400, "dose_unit": "milligrams"}, "UCUM"),
        ({"dose_value": -400, "dose_unit": "mg"}, "positive"),
        ({"dose_value": 0, "dose_unit": "mg"}, "positive"),
        ({"dose_value": 400}, "dose_unit"),
        ({"dose_unit": "mg"}, "dose_value"),
        ({"dose_value": "400", "dose_unit": "mg"}, "number"),
        ({"dose_value": 400, "dose_unit": "mg", "dose_value_max": 200}, "below"),
        ({"dose_value_max": 200}, "dose_value"),
        ({"frequency_per_day": 0}, "positive"),
        ({"frequency_per_day": -1}, "positive"),
        ({"frequency_per_day": 4, "frequency_per_day_max": 2}, "below"),
        ({"frequency_per_day_max": 6}, "frequency_per_day"),
        ({"frequency_per_day": 0.37}, "frequency_per_day"),
        ({"as_needed": "yes"}, "as_needed"),
        ({"subject": "pat-003"}, "Patient/"),
        ({"subject": None}, "subject"),
        ({"rxnorm_code": "ibuprofen"}, "rxnorm_code"),
        ({"rxnorm_code": None}, "rxnorm_code"),
        ({"display": ""}, "display"),
    ],
)
def test_build_rejects_with_readable_error(overrides, fragment):
    result = build(**overrides)
    assert set(result) == {"error"}, result
    assert fragment in result["error"]


def test_build_warns_on_catalog_mismatch():
    result = build(display="Ibuprofen 200 mg tab")
    assert_valid(result["resource"])
    assert any("catalog display" in w for w in result["warnings"])
    result = build(rxnorm_code="999999999")
    assert any("not in the site catalog" in w for w in result["warnings"])
    assert "warnings" not in build()


def _case_files():
    return sorted((REPO / "fixtures" / "write_cases").glob("*.json"))


@pytest.mark.parametrize("path", _case_files(), ids=lambda p: p.stem)
def test_every_expected_regimen_is_buildable_and_valid(path):
    """The tools can express every ground-truth answer (no case asks for the impossible)."""
    exp = json.loads(path.read_text(encoding="utf-8"))["expected"]
    d = exp["dosage"] or {}
    result = build_medication_statement(
        "Patient/x", exp["status"], exp["rxnorm_code"], exp["display"],
        dose_value=d.get("dose", {}).get("value"),
        dose_unit=d.get("dose", {}).get("unit"),
        frequency_per_day=d.get("frequency_per_day"),
        as_needed=d.get("as_needed"),
        dose_value_max=(d.get("dose_max") or {}).get("value"),
        frequency_per_day_max=d.get("frequency_per_day_max"),
    )
    assert "error" not in result and "warnings" not in result, result
    assert_valid(result["resource"])
    assert ("dosage" in result["resource"]) == bool(exp["dosage"])


# ---------------------------------------------------------------- validate


def test_validate_accepts_json_string():
    resource = build()["resource"]
    assert validate_medication_statement(json.dumps(resource))["valid"] is True


@pytest.mark.parametrize(
    "resource,fragment",
    [
        (None, "JSON object"),
        ([], "JSON object"),
        ("not json", "JSON"),
        ({}, "resourceType"),
        ({"resourceType": "Patient"}, "resourceType"),
        ({"resourceType": "MedicationStatement"}, "status"),
        ({"resourceType": "MedicationStatement", "status": "recorded", "subject": {"reference": "Patient/1"},
          "medicationCodeableConcept": {"text": "x"}}, "recorded"),
        ({"resourceType": "MedicationStatement", "status": "active", "subject": {"reference": "Patient/1"}},
         "medicationCodeableConcept"),
        ({"resourceType": "MedicationStatement", "status": "active", "medicationCodeableConcept": {"text": "x"}},
         "subject"),
        ({"resourceType": "MedicationStatement", "status": "active", "subject": {"reference": "Patient/1"},
          "medicationCodeableConcept": {"text": "x"}, "dosage": [{"timing": {"repeat": {"periodUnit": "days"}}}]},
         "periodUnit"),
        ({"resourceType": "MedicationStatement", "status": "active", "subject": {"reference": "Patient/1"},
          "medicationCodeableConcept": {"text": "x"}, "dosage": "twice daily"}, "dosage"),
        ({"resourceType": "MedicationStatement", "status": "active", "subject": {"reference": "Patient/1"},
          "medicationCodeableConcept": {"text": "x"}, "bogusField": 1}, "bogusField"),
    ],
)
def test_validate_reports_issues_without_raising(resource, fragment):
    report = validate_medication_statement(resource)
    assert report["valid"] is False
    assert report["issues"] and all(isinstance(i, str) for i in report["issues"])
    assert any(fragment in issue for issue in report["issues"]), report
    json.dumps(report)


def test_validate_reports_recorded_status_once():
    resource = build()["resource"] | {"status": "recorded"}
    issues = validate_medication_statement(resource)["issues"]
    assert len([i for i in issues if "status" in i]) == 1


# ---------------------------------------------------------------- langchain


def test_langchain_tools_wrap_the_three_tools():
    tools = langchain_tools()
    assert [t.name for t in tools] == [
        "lookup_medication_code", "build_medication_statement", "validate_medication_statement"
    ]
    lookup, builder, validator = tools
    assert all(t.description for t in tools)
    assert set(builder.args) >= {"subject", "status", "rxnorm_code", "display", "dose_value", "dose_unit",
                                 "frequency_per_day", "as_needed", "dose_value_max",
                                 "frequency_per_day_max", "note_text"}
    assert "catalog" not in builder.args and "catalog" not in lookup.args
    match = lookup.invoke({"query": "metoprolol 25 mg er"})["matches"][0]
    built = builder.invoke({"subject": "Patient/p1", "status": "active", "rxnorm_code": match["code"],
                            "display": match["display"], "dose_value": 25, "dose_unit": "mg",
                            "frequency_per_day": 1})
    assert validator.invoke({"resource": built["resource"]}) == {"valid": True, "issues": []}
    assert "error" in builder.invoke({"subject": "Patient/p1", "status": "recorded",
                                      "rxnorm_code": "1", "display": "x"})
    # arguments that fail the tool schema come back as a readable value, not an exception
    assert "error" in builder.invoke({"subject": "Patient/p1"})
    assert "error" in builder.invoke({"subject": "Patient/p1", "status": "active", "rxnorm_code": "1",
                                      "display": "x", "dose_value": "four hundred", "dose_unit": "mg"})
    assert validator.invoke({"resource": json.dumps(built["resource"])})["valid"] is True


def test_langchain_tools_with_explicit_catalog():
    entries = [{"code": "1", "display": "Foozamide 5 MG Oral Tablet", "system": RXNORM}]
    lookup = langchain_tools(Catalog(entries))[0]
    assert lookup.invoke({"query": "foozamide"})["matches"][0]["code"] == "1"


def _imports(tree):
    """(module-level imports, every import) of one module's AST, as absolute-or-dotted names."""
    def name(node, alias):
        return alias.name if isinstance(node, ast.Import) else "." * node.level + (node.module or "")
    every = {name(node, alias) for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
             for alias in node.names}
    top = {name(node, alias) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
           for alias in node.names}
    return top, every


def test_package_is_eval_free():
    """hc_tools imports nothing of the rest of the package but ``fhir.codes`` (plain constants)
    and itself; the packaged-data locator (which knows nothing of evals) only inside the
    function that finds the default catalog; none of langchain/healthchain at module level."""
    package = Path(hc_tools.__file__).parent
    modules = sorted(package.glob("*.py"))
    assert {p.stem for p in modules} >= {"__init__", "catalog", "build", "validate", "adapters"}
    ours = ("pytest_groundeval.fhir.codes", "pytest_groundeval.fhir.hc_tools")
    for path in modules:
        top, every = _imports(ast.parse(path.read_text(encoding="utf-8")))
        assert not any(n.startswith(".") for n in every), (path.name, every)
        outside = {n for n in every if n.startswith("pytest_groundeval") and not n.startswith(ours)}
        assert outside <= {"pytest_groundeval.tasks.resources"}, (path.name, outside)
        assert not any(n.startswith("pytest_groundeval") and not n.startswith(ours) for n in top), (path.name, top)
        assert not any(n.startswith(("langchain", "healthchain")) for n in top), (path.name, top)
    # codes.py imports nothing itself
    codes_top, codes_every = _imports(ast.parse(Path(package.parent, "codes.py").read_text(encoding="utf-8")))
    assert codes_every <= {"__future__"}, codes_every


def test_package_reexports_its_modules_public_names():
    """``hc_tools.X`` is the same object as ``hc_tools.<module>.X`` for every public name."""
    from pytest_groundeval.fhir.hc_tools import adapters, build, catalog, validate

    for module in (adapters, build, catalog, validate):
        for public in module.__all__:
            assert getattr(hc_tools, public) is getattr(module, public), (module.__name__, public)
            assert public in hc_tools.__all__, public


# ---------------------------------------------------------------- the tools driven by the baseline agent


@pytest.mark.parametrize("path", _case_files(), ids=lambda p: p.stem)
def test_baseline_agent_drives_the_tools(path):
    """Smoke test: the rule-based agent only writes what the tools built and validated."""
    from pytest_groundeval.tasks.write_baseline import run_baseline_write

    case = json.loads(path.read_text(encoding="utf-8"))
    out = run_baseline_write(case["note"], case["subject"])
    assert set(out) == {"resource", "transcript"}
    tools = [step["tool"] for step in out["transcript"]]
    assert tools[0] == "lookup_medication_code"
    assert set(tools) <= {"lookup_medication_code", "build_medication_statement", "validate_medication_statement"}
    assert all(set(step) == {"tool", "args", "result"} for step in out["transcript"])
    json.dumps(out)
    if out["resource"] is not None:
        assert tools[-1] == "validate_medication_statement"
        assert out["resource"]["subject"] == {"reference": case["subject"]}
        assert_valid(out["resource"])
