"""hc_tools on HealthChain 0.16's FHIRToolkit and TerminologyLookup.

The site catalog is a HealthChain ``TerminologyLookup`` that ``FHIRToolkit`` accepts; the
bundle reader goes through the toolkit's ``get_coded_entries`` and gives what the
hand-rolled reader gave; and the tools the LangGraph agent is bound to are unchanged
(names, argument schemas, descriptions): cached model calls and the scripted-model tests
key on them. The last test pins the toolkit gaps FRICTION.md D10/D11 describe.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from pytest_groundeval.fhir import hc_tools
from pytest_groundeval.fhir.hc_tools import (
    Catalog,
    build_medication_statement,
    fhir_toolkit,
    get_catalog,
    langchain_bundle_tools,
    langchain_tools,
    list_medication_requests,
    lookup_medication_code,
)

from healthchain.fhir import get_medications, load_bundle
from healthchain.terminology import Coding, LocalCodeLookup, TerminologyLookup
from healthchain.tools import FHIRToolkit

REPO = Path(__file__).resolve().parents[2]
SYNTHEA = sorted((REPO / "fixtures" / "synthea").glob("*.json"))
RXNORM = "http://www.nlm.nih.gov/research/umls/rxnorm"
STATUSES = (None, "active", "stopped", "completed", " Active ")


def _codings(matches):
    return [{k: m[k] for k in ("code", "display", "system")} for m in matches]


# ---------------------------------------------------------------- the catalog as a TerminologyLookup


def test_catalog_is_a_healthchain_terminology_lookup():
    catalog = get_catalog()
    assert isinstance(catalog, TerminologyLookup)
    hits = catalog.search("metoprolol 25 mg er")
    assert hits and all(type(c) is Coding for c in hits)
    # the same ranking as the scored lookup, every match (the protocol has no limit)
    assert [c.model_dump() for c in hits] == _codings(catalog.lookup("metoprolol 25 mg er", len(catalog)))
    assert hits[0].code == "866427"
    assert [c.code for c in catalog.search("metoprolol 25 mg er", limit=2)] == [c.code for c in hits[:2]]
    assert catalog.search("metoprolol", system="http://loinc.org") == []
    assert catalog.search("metoprolol", system=RXNORM) == catalog.search("metoprolol")
    assert catalog.search("") == catalog.search("xyzzy") == catalog.search(None) == []


def test_fhirtoolkit_lookup_code_over_the_site_catalog_returns_our_codes():
    kit = FHIRToolkit(lookup=get_catalog())
    assert kit.lookup is get_catalog()
    for query, code in (("Toprol XL 100 mg", "866414"), ("Klonopin", "1153378"), ("HCTZ 25 mg tab", "310798")):
        got = kit.run_tool("lookup_code", {"query": query})
        assert got[0]["code"] == code  # none of these is in HealthChain's demo catalog
        assert got == _codings(get_catalog().lookup(query, len(get_catalog())))
    assert FHIRToolkit().run_tool("lookup_code", {"query": "Toprol XL 100 mg"}) == []  # the demo catalog


def test_fhirtoolkit_list_codes_enumerates_the_catalog_and_entries_stays_a_list():
    catalog = get_catalog()
    raw = json.loads(hc_tools.default_catalog_path().read_text(encoding="utf-8"))
    # Catalog.entries is still the list of dicts it always was ...
    assert isinstance(catalog.entries, list) and catalog.entries == [
        {"code": str(e["code"]), "display": e["display"], "system": e.get("system") or RXNORM} for e in raw
    ]
    # ... and calling it is the enumeration FHIRToolkit's list_codes needs
    kit = FHIRToolkit(lookup=catalog)
    assert "list_codes" in [t.name for t in kit.get_tools()]
    assert kit.run_tool("list_codes", {}) == list(catalog.entries)
    assert kit.run_tool("list_codes", {"system": "http://loinc.org"}) == []


def test_any_terminology_lookup_can_serve_the_lookup_tool():
    demo = LocalCodeLookup()
    result = lookup_medication_code("metoprolol 25", catalog=demo)
    assert result == {"query": "metoprolol 25", "matches": [
        {"code": "866427", "display": "24 HR metoprolol succinate 25 MG Extended Release Oral Tablet",
         "system": RXNORM}]}
    assert lookup_medication_code("hypertension", catalog=demo)["matches"] == []  # RxNorm codings only
    assert len(lookup_medication_code("metoprolol", 1, catalog=demo)["matches"]) == 1
    tool = langchain_tools(demo)[0]
    assert tool.invoke({"query": "clopidogrel"})["matches"][0]["code"] == "309362"

    class Down:
        def search(self, text, system=None):
            raise ConnectionError("terminology server unreachable")

    result = lookup_medication_code("aspirin", catalog=Down())
    assert result["matches"] == [] and "unreachable" in result["error"]
    # the build tool's catalog check asks the lookup too, and never raises
    assert "warnings" not in build_medication_statement(
        "Patient/p", "active", "866427", "24 HR metoprolol succinate 25 MG Extended Release Oral Tablet",
        catalog=demo)
    built = build_medication_statement("Patient/p", "active", "310965", "Ibuprofen 200 MG Oral Tablet",
                                       catalog=Catalog([]))
    assert "not in the site catalog" in built["warnings"][0]
    built = build_medication_statement("Patient/p", "active", "999999", "Ibuprofen 200 MG Oral Tablet",
                                       catalog=demo)
    assert "resource" in built and "terminology lookup" in built["warnings"][0]
    assert set(build_medication_statement("Patient/p", "active", "1", "x", catalog=Down())) == {"resource"}


def test_importing_hc_tools_does_not_import_healthchain():
    """HealthChain costs ~0.2 s (``import healthchain``) to ~0.5 s (``healthchain.tools``) to
    import; hc_tools imports it inside the functions that use it."""
    import subprocess
    import sys

    code = "import sys, pytest_groundeval.fhir.hc_tools; print(sorted(m for m in sys.modules if m.split('.')[0] in ('healthchain', 'langchain_core')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------- the bundle reader on FHIRToolkit


def _reference_reader(bundle, status):
    """The reader hc_tools had before it went through FHIRToolkit: get_medications, grouped."""
    if isinstance(bundle, str):
        bundle = load_bundle(json.loads(bundle), version="R4B")
    entries = get_medications(bundle, status=None if status is None else status.strip().lower())
    grouped = {}
    for e in entries:
        if e.resource_type != "MedicationRequest":
            continue
        coding = next((c for c in e.codings if c.system == RXNORM and c.code), None)
        code = coding.code if coding else e.code
        item = grouped.setdefault((code, e.status), {
            "code": code, "display": (coding.display if coding else None) or e.display,
            "status": e.status, "requests": 0, "last_authored_on": None})
        item["requests"] += 1
        if e.authored_on and (item["last_authored_on"] is None or e.authored_on > item["last_authored_on"]):
            item["last_authored_on"] = e.authored_on
    out = list(grouped.values())
    return {"status": status, "count": len(out), "medication_requests": out}


@pytest.mark.parametrize("path", SYNTHEA, ids=lambda p: p.stem[:24])
def test_bundle_reader_gives_what_the_hand_rolled_reader_gave(path):
    text = path.read_text(encoding="utf-8")
    loaded = load_bundle(json.loads(text), version="R4B")  # loading validates every entry: once
    reader = langchain_bundle_tools(text)[1]
    for status in STATUSES:
        expected = _reference_reader(loaded, status)
        assert list_medication_requests(loaded, status) == expected
        assert reader.invoke({} if status is None else {"status": status}) == expected
    expected = _reference_reader(loaded, None)
    assert list_medication_requests(text) == expected  # a JSON string is loaded as R4B


def test_bundle_tools_pin_r4b_whatever_the_process_default():
    """HealthChain's toolkit loads and validates with the process-wide default FHIR version;
    hc_tools loads the bundle as R4B itself, so a default of R5 changes nothing."""
    from healthchain.fhir.version import reset_default_version, set_default_version

    text = next(p for p in SYNTHEA if p.name.startswith("Adalberto")).read_text(encoding="utf-8")
    expected = _reference_reader(text, "active")
    assert expected["count"] > 0
    set_default_version("R5")
    try:
        with pytest.raises(Exception):
            FHIRToolkit(bundle=text)  # the toolkit on its own reads this R4B bundle as R5 and fails
        assert list_medication_requests(text, "active") == expected
        assert langchain_bundle_tools(text)[1].invoke({"status": "active"}) == expected
        kit = fhir_toolkit(text)
        assert type(kit.bundle).__module__ == "fhir.resources.R4B.bundle"
    finally:
        reset_default_version()


def test_fhir_toolkit_helper_uses_the_site_catalog_and_errors_stay_values():
    text = SYNTHEA[0].read_text(encoding="utf-8")
    kit = fhir_toolkit(text)
    assert kit.lookup is get_catalog()
    assert kit.run_tool("lookup_code", {"query": "Tylenol 325 mg"})[0]["code"] == "209387"
    counts = kit.run_tool("get_coded_entries", {"resource_type": "MedicationRequest"})
    assert isinstance(counts, list)
    mine = Catalog([{"code": "1", "display": "Foozamide 5 MG Oral Tablet"}])
    assert fhir_toolkit(text, mine).lookup is mine
    with pytest.raises(Exception):
        fhir_toolkit("{not json")
    for bad in ("{not json", '{"resourceType": "Patient"}', "[]", 5):
        assert set(list_medication_requests(bad)) == {"error"}
        assert set(langchain_bundle_tools(bad)[1].invoke({})) == {"error"}
    assert "status must be one of" in langchain_bundle_tools(text)[1].invoke({"status": "paused"})["error"]


# ---------------------------------------------------------------- what the LangGraph agent is bound to

# name -> (argument schema, sha256 of the whole OpenAI-format tool: name, description, parameters)
AGENT_TOOLS = {
    "lookup_medication_code": (
        {"properties": {"query": {"type": "string"}, "limit": {"default": 5, "type": "integer"}},
         "required": ["query"], "type": "object"},
        "6256c8ac6c5824ca6c01aca858556898f6f846f4a32efc5c81b9d5259b79d22b",
    ),
    "build_medication_statement": (
        {"properties": {
            "subject": {"type": "string"}, "status": {"type": "string"},
            "rxnorm_code": {"type": "string"}, "display": {"type": "string"},
            "dose_value": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": None},
            "dose_unit": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "frequency_per_day": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": None},
            "as_needed": {"anyOf": [{"type": "boolean"}, {"type": "null"}], "default": None},
            "dose_value_max": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": None},
            "frequency_per_day_max": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": None},
            "note_text": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}},
         "required": ["subject", "status", "rxnorm_code", "display"], "type": "object"},
        "7383f846312aeaa028ad7ebb80b122cb1b6270a6e66b87774d1c5867799aa848",
    ),
    "validate_medication_statement": (
        {"properties": {"resource": {"anyOf": [{"additionalProperties": True, "type": "object"},
                                               {"type": "string"}]}},
         "required": ["resource"], "type": "object"},
        "6e0ebaf14820aab5a69a0304f83751c32396475df2178139375842169343ed1a",
    ),
    "list_medication_requests": (
        {"properties": {"status": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}},
         "type": "object"},
        "d815904d91916fbae50d7e6c4a382e5d9e5c946d177250f961523b544b3a97dd",
    ),
}


def _spec(tool):
    from langchain_core.utils.function_calling import convert_to_openai_tool

    spec = convert_to_openai_tool(tool)["function"]
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode("utf-8")).hexdigest()
    return spec["name"], spec["parameters"], digest


@pytest.mark.parametrize("task", ["write", "reconciliation"])
def test_the_langgraph_agents_tools_are_unchanged(task):
    """Names, argument schemas and descriptions exactly as before FHIRToolkit: the model cache
    keys on them and the write suite's scripted model replays calls against them. A change
    here must be deliberate (and invalidates recorded model calls). Changed deliberately once
    since: list_medication_requests says how it marks doNotPerform requests (issue 15)."""
    if task == "write":
        from pytest_groundeval.tasks.write import WriteTask

        tools = WriteTask(REPO / "fixtures" / "write_cases").agent_tools({})
        names = ["lookup_medication_code", "build_medication_statement", "validate_medication_statement"]
    else:
        from pytest_groundeval.tasks.reconciliation import ReconciliationTask

        text = SYNTHEA[0].read_text(encoding="utf-8")
        tools = ReconciliationTask(REPO / "fixtures" / "reconciliation").agent_tools({"bundle_json": text})
        names = ["lookup_medication_code", "list_medication_requests"]
    specs = [_spec(t) for t in tools]
    assert [name for name, _, _ in specs] == names
    for name, parameters, digest in specs:
        assert parameters == AGENT_TOOLS[name][0], name
        assert digest == AGENT_TOOLS[name][1], f"{name}: the tool description changed"


# ---------------------------------------------------------------- FRICTION.md D10/D11, pinned


def test_friction_fhirtoolkit_gaps_hc_tools_works_around():
    """What FHIRToolkit 0.16 cannot do that our tools do (FRICTION.md D10, D11). When this
    fails, HealthChain closed a gap: update FRICTION.md and build more on the toolkit."""
    kit = FHIRToolkit(lookup=get_catalog())
    build = {"resource_type": "MedicationStatement", "subject": "Patient/p", "code": "310965",
             "display": "Ibuprofen 200 MG Oral Tablet", "status": "active"}
    # D10: every other day (0.5/day) is an error; quantities carry no UCUM system/code;
    # a count unit is accepted; no PRN, dose range, frequencyMax or note parameters;
    # the coding defaults to SNOMED CT and a random id is generated
    assert "integer" in kit.run_tool("build_resource", build | {
        "dose_value": 200, "dose_unit": "mg", "frequency_per_day": 0.5})["error"]
    built = kit.run_tool("build_resource", build | {"dose_value": 2, "dose_unit": "tablet", "frequency_per_day": 3})
    assert built["ok"] and built["resource"]["dosage"][0]["doseAndRate"] == [
        {"doseQuantity": {"value": 2, "unit": "tablet"}}]
    assert built["resource"]["medicationCodeableConcept"]["coding"][0]["system"] == "http://snomed.info/sct"
    assert built["resource"]["id"].startswith("hc-")
    params = next(t for t in kit.get_tools() if t.name == "build_resource").input_schema["properties"]
    assert not {"as_needed", "dose_value_max", "frequency_per_day_max", "note_text"} & set(params)
    assert params["frequency_per_day"]["anyOf"][0] == {"type": "integer"}
    # ours: the same regimens, valid R4B
    ours = build_medication_statement("Patient/p", "active", "310965", "Ibuprofen 200 MG Oral Tablet",
                                      dose_value=200, dose_unit="mg", frequency_per_day=0.5)
    assert ours["resource"]["dosage"][0]["timing"]["repeat"] == {"frequency": 1, "period": 2, "periodUnit": "d"}
    assert "tablet" in build_medication_statement("Patient/p", "active", "310965", "x", dose_value=2,
                                                  dose_unit="tablet")["error"]
    # D11: validate_resource raises on a JSON string (or None, or a list) instead of
    # returning a report; and it has no FHIR version argument
    for bad in ('{"resourceType": "MedicationStatement"}', None, []):
        with pytest.raises(AttributeError):
            kit.run_tool("validate_resource", {"resource": bad})
        assert hc_tools.validate_medication_statement(bad)["valid"] is False
    params = next(t for t in kit.get_tools() if t.name == "validate_resource").input_schema["properties"]
    assert set(params) == {"resource", "resource_type"}
    # lookup_code raises on a non-string query (ours returns an error value)
    with pytest.raises(AttributeError):
        kit.run_tool("lookup_code", {"query": 5})
    assert "error" in lookup_medication_code(5)
