"""A corpus of bad inputs beyond tests/pytest/test_bad_inputs.py, and the secrets canary over the
sinks tests/store/test_redaction.py does not cover.

1. Extraction bundles: not R4 (STU3 fields, a DSTU2 ``MedicationOrder``), no Patient among
   other entries, a ``medicationReference`` that dangles (urn:uuid, ``Medication/id``,
   contained ``#id``; on an active and on a completed request), fields of the wrong JSON
   type, and two files giving one case id. Each selected case gets exactly one record
   entry: a ``case`` error naming the file and the reason (the agent not called), or the
   correct score; never an ``internal`` error, never a crashed collection or session.
2. Write cases: every field of a committed case in turn missing and wrong-typed (generated
   from the case, one mutated case per (field, value) in one cases file): each is a ``case``
   error for that case only and never reaches the agent, while the intact cases beside it
   run; plus ``{"cases": [5]}`` and ``{"cases": [{}]}``.
3. Secrets: a canary key the agent echoes into its answers and into an exception is absent
   from ``--junitxml`` output and from the model-call cache files (``--model-cache``, the
   LangGraph agent driven by a scripted chat model); the record, journal and cache files
   share one file mode.

The corpus sessions run once per module (in a fresh interpreter, ``python -m pytest``) and
the parametrized tests read their records, so each input is its own test (and its own
``xfail`` where the harness falls short) without a session per input.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, REFS, SMALL_SET, STOPPED_ACTIVE, SYNTHEA, ZERO, read_record

from pytest_groundeval.store.redact import MARK
from pytest_groundeval.tasks.extraction import active_medications

EXTRACTION_EVAL = '''
import pytest

@pytest.mark.extraction
def test_extraction(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
'''

WRITE_EVAL = '''
import pytest

@pytest.mark.write
def test_write(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
'''

# A user agent that answers right and appends, for every call, the SHA-256 of the bundle it
# was shown (the prompt opens with the bundle's text, exactly the file's bytes) to AGENT_CALLS.
RECORDING_EXTRACTION = '''
import hashlib, json, os
from pytest_groundeval.tasks.extraction import active_medications

class Recording:
    name = "recording"
    def run(self, prompt):
        text = prompt.split("Bundle:\\n", 1)[1].split("\\n(End of the bundle.)\\n", 1)[0]
        with open(os.environ["AGENT_CALLS"], "a") as fh:
            fh.write(hashlib.sha256(text.encode("utf-8")).hexdigest() + "\\n")
        return json.dumps({"active_medications": active_medications(json.loads(text), "prompt")})
'''

# A user agent for write cases: logs the patient reference of every prompt it gets to
# AGENT_CALLS, then answers as the offline baseline would from the prompt alone.
RECORDING_WRITE = '''
import json, os, re
from pytest_groundeval.tasks.write_baseline import run_baseline_write

class Recording:
    name = "recording"
    def run(self, prompt):
        found = re.search(r"for the patient (.*?)\\.\\n", prompt)
        subject = found.group(1) if found else prompt[:200]
        with open(os.environ["AGENT_CALLS"], "a") as fh:
            fh.write(json.dumps(subject) + "\\n")
        resource = run_baseline_write(prompt.split("Clinical note:\\n", 1)[1], subject)["resource"]
        return {"text": json.dumps(resource), "structured": resource}
'''


def _inner(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """A pytest session in a fresh interpreter, in ``cwd`` (its rootdir), with no tracing."""
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYTEST_", "LANGSMITH_", "LANGCHAIN_"))}
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:langsmith_plugin", "-p", "no:anyio",
         *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=300)


def _sha(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def _load(stem: str) -> dict[str, Any]:
    return json.loads((SYNTHEA / f"{stem}.json").read_text(encoding="utf-8"))


# ====================================================================== 1. extraction bundles
def _first_active(bundle: dict) -> dict:
    return next(e["resource"] for e in bundle["entry"]
                if e["resource"]["resourceType"] == "MedicationRequest" and e["resource"]["status"] == "active")


def _by_reference(bundle: dict, reference: str, contained: Any = None) -> dict:
    """The first active request names its medication by ``reference`` instead of inline."""
    req = _first_active(bundle)
    req.pop("medicationCodeableConcept")
    req["medicationReference"] = {"reference": reference}
    if contained is not None:
        req["contained"] = contained
    return bundle


def _stu3(bundle: dict) -> dict:
    """STU3's MedicationRequest: ``context`` (R4: ``encounter``), ``requester.agent`` (R4: the
    reference itself). The medication facts are the same as in R4."""
    for e in bundle["entry"]:
        r = e["resource"]
        if r["resourceType"] == "MedicationRequest":
            r["context"] = r.pop("encounter")
            r["requester"] = {"agent": r.pop("requester")}
    return bundle


def _dstu2(bundle: dict) -> dict:
    """DSTU2: prescriptions are ``MedicationOrder`` (``dateWritten``, ``patient``,
    ``prescriber``); R4 has no such resource."""
    for e in bundle["entry"]:
        r = e["resource"]
        if r["resourceType"] == "MedicationRequest":
            r["resourceType"] = "MedicationOrder"
            r.pop("intent")
            r["dateWritten"], r["patient"], r["prescriber"] = r.pop("authoredOn"), r.pop("subject"), r.pop("requester")
    return bundle


def _meta(rtype: str, **meta: Any):
    """``meta`` set on the Bundle (rtype "Bundle") or on its first active MedicationRequest."""
    def mutate(bundle: dict) -> dict:
        (bundle if rtype == "Bundle" else _first_active(bundle))["meta"] = meta
        return bundle
    return mutate


def _first(bundle: dict, rtype: str) -> dict:
    return next(e["resource"] for e in bundle["entry"] if e["resource"]["resourceType"] == rtype)


def _patched(rtype: str, **fields: Any):
    """``fields`` set on the first resource of ``rtype`` (``...`` deletes the field)."""
    def mutate(bundle: dict) -> dict:
        res = _first(bundle, rtype)
        for key, value in fields.items():
            res.pop(key) if value is ... else res.__setitem__(key, value)
        return bundle
    return mutate


def _first_ended(bundle: dict) -> dict:
    return next(e["resource"] for e in bundle["entry"]
                if e["resource"]["resourceType"] == "MedicationRequest" and e["resource"]["status"] != "active")


def _ended_status(value: str):
    """A request the truth does not read (not active) gets the status ``value``."""
    def mutate(bundle: dict) -> dict:
        _first_ended(bundle)["status"] = value
        return bundle
    return mutate


def _no_status(bundle: dict) -> dict:
    del _first_active(bundle)["status"]
    return bundle


def _r5_medication(bundle: dict) -> dict:
    """R5's MedicationRequest: ``medication`` is a CodeableReference (R4: medication[x])."""
    req = _first_active(bundle)
    req["medication"] = {"concept": req.pop("medicationCodeableConcept")}
    return bundle


def _stu3_requester_only(bundle: dict) -> dict:
    """STU3's ``requester.agent`` alone (``encounter`` kept)."""
    req = _first_active(bundle)
    req["requester"] = {"agent": req["requester"]}
    return bundle


def _extra_entry(value: Any):
    def mutate(bundle: dict) -> dict:
        bundle["entry"].append(value)
        return bundle
    return mutate


def _without(bundle: dict, rtype: str) -> dict:
    bundle["entry"] = [e for e in bundle["entry"] if e["resource"]["resourceType"] != rtype]
    return bundle


def _set(path: tuple, value: Any):
    def mutate(bundle: dict) -> dict:
        target: Any = _first_active(bundle)
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return bundle
    return mutate


def _entry(value: Any):
    def mutate(bundle: dict) -> dict:
        bundle["entry"] = value
        return bundle
    return mutate


def _unhashable_medication_id(bundle: dict) -> dict:
    """A list where a Medication's id is a string, reached through ``Medication/<id>``."""
    med = next(e for e in bundle["entry"] if e["resource"]["resourceType"] == "Medication")
    _by_reference(bundle, f"Medication/{med['resource']['id']}")
    med["resource"]["id"] = [med["resource"]["id"]]
    return bundle


REFS_TRUTH = active_medications(_load(REFS), "truth")  # three active codes, all inline
assert len(REFS_TRUTH) == 3 and _load(REFS)["entry"]  # the base the corpus mutates

GONE = "00000000-0000-4000-8000-00000000dead"  # a Medication that is not in the bundle

# stem: (build from the REFS bundle, expected, defect of the recording agent, defect of the baseline)
#   expected: ("error", message fragments) | ("scored", truth)
CORPUS: dict[str, tuple[Any, tuple[str, Any], str | None, str | None]] = {
    "no-patient": (lambda b: _without(b, "Patient"), ("error", ["the Bundle has no Patient resource"]), None, None),
    "dangling-urn": (lambda b: _by_reference(b, f"urn:uuid:{GONE}"),
                     ("error", [f"medicationReference 'urn:uuid:{GONE}' cannot be resolved"]), None, None),
    "dangling-id": (lambda b: _by_reference(b, "Medication/not-in-this-bundle"),
                    ("error", ["medicationReference 'Medication/not-in-this-bundle' cannot be resolved"]), None, None),
    "dangling-contained": (lambda b: _by_reference(b, "#med-1", contained=[]),
                           ("error", ["medicationReference '#med-1' cannot be resolved"]), None, None),
    # the one medicationReference of REFS is on a completed request: the truth does not need it
    "dangling-on-completed": (lambda b: _without(b, "Medication"), ("scored", REFS_TRUTH), None, None),
    # not R4: found by the truth reader (fhir.py), for every agent
    "stu3": (_stu3, ("error", ["not a FHIR R4 bundle", "'context'", "STU3"]), None, None),
    "stu3-requester-agent": (_stu3_requester_only, ("error", ["not a FHIR R4 bundle", "requester.agent"]), None, None),
    "dstu2-medication-order": (_dstu2, ("error", ["not a FHIR R4 bundle", "MedicationOrder", "DSTU2"]), None, None),
    "r5-medication": (_r5_medication, ("error", ["not a FHIR R4 bundle", "'medication'", "R5"]), None, None),
    "stu3-medication-is-brand": (_patched("Medication", isBrand=False), ("error", ["not a FHIR R4 bundle", "isBrand"]),
                                 None, None),
    "stu3-profile": (_meta("MedicationRequest", profile=["http://hl7.org/fhir/STU3/StructureDefinition/MedicationRequest"]),
                     ("error", ["not a FHIR R4 bundle", "STU3/StructureDefinition"]), None, None),
    "stu3-version-tag": (_meta("Bundle", tag=[{"system": "http://hl7.org/fhir/FHIR-version", "code": "3.0.2"}]),
                         ("error", ["not a FHIR R4 bundle", "'3.0.2'"]), None, None),
    # the same hints naming R4: scored
    "r4-profiles": (_meta("MedicationRequest", profile=[
        "http://hl7.org/fhir/StructureDefinition/MedicationRequest|4.0.1",
        "http://hl7.org/fhir/us/core/StructureDefinition/us-core-medicationrequest|3.1.1"]), ("scored", REFS_TRUTH),
        None, None),
    "r4-version-tag": (_meta("Bundle", tag=[{"system": "http://hl7.org/fhir/FHIR-version", "code": "4.0.1"}]),
                       ("scored", REFS_TRUTH), None, None),
    # R4B-invalid where the truth does not look: HealthChain's loader (the baseline's) refuses it at load
    "r4b-status-not-in-value-set": (_ended_status("finished"),
                                    ("error", ["not a valid FHIR R4B Bundle", "status", "finished"]), None, None),
    "r4b-unknown-patient-field": (_patched("Patient", favouriteColour="blue"),
                                  ("error", ["not a valid FHIR R4B Bundle", "favouriteColour"]), None, None),
    "entry-without-resource": (_extra_entry({"fullUrl": "urn:uuid:nothing-here"}), ("scored", REFS_TRUTH), None, None),
    "entry-is-a-number": (_entry(5), ("error", ["entry"]), None, None),
    "entry-is-a-string": (_entry("x"), ("error", []), None, None),
    "status-is-a-list": (_set(("status",), ["active"]), ("error", ["status"]), None, None),
    "status-is-an-object": (_set(("status",), {"code": "active"}), ("error", ["status"]), None, None),
    "coding-is-a-number": (_set(("medicationCodeableConcept", "coding"), 5), ("error", ["coding"]), None, None),
    "coding-is-an-object": (_set(("medicationCodeableConcept", "coding"), {"system": "x"}), ("error", []),
                            None, None),
    "code-is-a-number": (_set(("medicationCodeableConcept", "coding", 0, "code"), 5), ("error", ["code"]),
                         None, None),
    "code-is-a-list": (_set(("medicationCodeableConcept", "coding", 0, "code"), ["5"]), ("error", ["code"]),
                       None, None),
    "medication-is-null": (_set(("medicationCodeableConcept",), None), ("error", ["no RxNorm coding"]), None, None),
    "reference-is-a-number": (lambda b: _set(("medicationReference", "reference"), 5)(_by_reference(b, "x")),
                              ("error", ["medicationReference"]), None, None),
    "contained-is-a-number": (lambda b: _by_reference(b, "#med-1", contained=5), ("error", ["contained"]),
                              None, None),
    "medication-id-is-a-list": (_unhashable_medication_id, ("error", ["id"]), None, None),
    "display-is-a-number": (_set(("medicationCodeableConcept", "coding", 0, "display"), 5), ("error", ["display"]),
                            None, None),
    "status-missing": (_no_status, ("error", ["has no status"]), None, None),
    "entry-item-is-a-number": (_extra_entry(5), ("error", ["Bundle.entry["]), None, None),
    "resource-is-a-string": (_extra_entry({"resource": "Patient"}), ("error", ["resource"]), None, None),
    "full-url-is-a-list": (_extra_entry({"fullUrl": ["urn:uuid:x"], "resource": {"resourceType": "Basic"}}),
                           ("error", ["fullUrl"]), None, None),
}
AGENTS = {"recording": "recording_agent:Recording", "baseline": "baseline"}


@pytest.fixture(scope="module")
def extraction_corpus(tmp_path_factory) -> dict[str, dict[str, Any]]:
    """The corpus and four intact committed bundles in one data folder, run once by each agent."""
    project = tmp_path_factory.mktemp("extraction-corpus")
    (project / "test_evals.py").write_text(EXTRACTION_EVAL)
    (project / "recording_agent.py").write_text(RECORDING_EXTRACTION)
    data = project / "data"
    data.mkdir()
    hashes = {}
    for stem in SMALL_SET:
        shutil.copy(SYNTHEA / f"{stem}.json", data / f"{stem}.json")
        hashes[stem] = _sha((data / f"{stem}.json").read_bytes())
    for stem, (build, *_rest) in CORPUS.items():
        raw = json.dumps(build(_load(REFS))).encode("utf-8")
        (data / f"{stem}.json").write_bytes(raw)
        hashes[stem] = _sha(raw)
    runs = {}
    for agent, spec in AGENTS.items():
        calls = project / f"{agent}-calls.txt"
        proc = _inner(project, "--data-dir", "data", "--run-record", f"{agent}.json", f"--agent={spec}",
                      env={"AGENT_CALLS": str(calls)})
        record = json.loads((project / f"{agent}.json").read_text())
        runs[agent] = {"proc": proc, "record": record, "cases": {c["case_id"]: c for c in record["cases"]},
                       "calls": calls.read_text().split() if calls.exists() else [], "hashes": hashes}
    return runs


@pytest.mark.parametrize("agent", list(AGENTS))
def test_the_corpus_session_records_every_file_once_and_ends_normally(extraction_corpus, agent):
    run = extraction_corpus[agent]
    out = run["proc"].stdout + run["proc"].stderr
    assert run["proc"].returncode == pytest.ExitCode.TESTS_FAILED, out[-3000:]  # never INTERNAL_ERROR / INTERRUPTED
    assert "INTERNALERROR" not in out
    ids = [c["case_id"] for c in run["record"]["cases"]]
    assert sorted(ids) == sorted([*SMALL_SET, *CORPUS])  # exactly one entry per file
    assert run["record"]["completeness"]["cut_short"] is False
    for stem in SMALL_SET:  # the intact bundles beside the corpus still run, and pass
        assert run["cases"][stem]["outcome"] == "passed", run["cases"][stem]
    if agent == "recording":  # every intact bundle was sent to the agent exactly once
        assert all(run["calls"].count(run["hashes"][stem]) == 1 for stem in SMALL_SET)


def _corpus_params():
    for agent in AGENTS:
        for stem, (_, _, recording_defect, baseline_defect) in CORPUS.items():
            defect = recording_defect if agent == "recording" else baseline_defect
            marks = [pytest.mark.xfail(strict=True, reason=defect)] if defect else []
            yield pytest.param(agent, stem, marks=marks, id=f"{agent}-{stem}")


@pytest.mark.parametrize("agent, stem", list(_corpus_params()))
def test_each_bad_bundle_is_one_case_error_naming_its_file_or_is_scored_right(extraction_corpus, agent, stem):
    run = extraction_corpus[agent]
    case = run["cases"][stem]
    kind, expected = CORPUS[stem][1]
    error = case["error"] or {}
    if kind == "error":
        assert case["outcome"] == "error" and error.get("kind") == "case", case
        assert error["message"].startswith(f"{stem}.json: "), error["message"]  # names the file
        for fragment in expected:
            assert fragment in error["message"], error["message"]
        assert case["score"] is None and case["raw_output"] is None
        if agent == "recording":  # a case error is found before the agent is called
            assert run["hashes"][stem] not in run["calls"]
    else:
        assert case["outcome"] == "passed", case  # the right answer, scored as right
        assert case["ground_truth"] == expected
        assert case["error"] is None


DUPLICATE_SOURCES = ("extraction", "write")


@pytest.fixture(scope="module")
def duplicates(tmp_path_factory) -> dict[str, dict[str, Any]]:
    """Per source, a session over cases two of which share the id ``x``, beside intact cases:
    ``x.json`` and ``x.json.gz`` in a data folder; two items ``x`` in one cases file."""
    runs = {}
    for source in DUPLICATE_SOURCES:
        project = tmp_path_factory.mktemp(f"duplicates-{source}")
        if source == "extraction":
            (project / "test_evals.py").write_text(EXTRACTION_EVAL)
            (project / "recording_agent.py").write_text(RECORDING_EXTRACTION)
            data = project / "data"
            data.mkdir()
            for stem in SMALL_SET:
                shutil.copy(SYNTHEA / f"{stem}.json", data / f"{stem}.json")
            # REFS's bundle, written differently: the intact REFS case sends the agent its own bytes
            raw = json.dumps(json.loads((SYNTHEA / f"{REFS}.json").read_bytes()), indent=1).encode()
            (data / "x.json").write_bytes(raw)
            (data / "x.json.gz").write_bytes(gzip.compress(raw))
            args, intact, forbidden = ("--data-dir", "data"), list(SMALL_SET), [_sha(raw)]
            fragments, names = ["two case files share the id 'x'", "x.json and x.json.gz"], ["x.json", "x.json.gz"]
        else:
            (project / "test_w.py").write_text(WRITE_EVAL)
            (project / "recording_agent.py").write_text(RECORDING_WRITE)
            items = []
            for cid, subject in (("intact", "Patient/intact"), ("x", "Patient/dup-a"), ("x", "Patient/dup-b")):
                item = copy.deepcopy(BASE_CASE)
                item["case_id"], item["subject"] = cid, subject
                items.append(item)
            (project / "cases.json").write_text(json.dumps({"cases": items}))
            args, intact = ("--write-cases", "cases.json"), ["intact"]
            forbidden = ['"Patient/dup-a"', '"Patient/dup-b"']  # as the write agent logs them (JSON)
            fragments, names = ["cases.json: duplicate case ids ['x']"], ["cases.json"]
        calls = project / "calls.txt"
        proc = _inner(project, *args, "--run-record", "record.json", "--agent=recording_agent:Recording",
                      env={"AGENT_CALLS": str(calls), "CI": "1"})  # CI: pytest's short summary keeps whole messages
        record = project / "record.json"
        runs[source] = {"proc": proc, "record": json.loads(record.read_text()) if record.exists() else None,
                        "calls": calls.read_text().split() if calls.exists() else [], "intact": intact,
                        "forbidden": forbidden, "fragments": fragments, "names": names}
    return runs


@pytest.mark.parametrize("source", DUPLICATE_SOURCES)
def test_duplicate_case_ids_are_named_and_the_agent_never_sees_them(duplicates, source):
    """Whatever the run does with two cases of one id, it names the files and the id, ends
    without an internal error, and never sends either duplicate to the agent."""
    run = duplicates[source]
    out = run["proc"].stdout + run["proc"].stderr
    assert run["proc"].returncode not in (pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.OK), out[-3000:]
    assert "INTERNALERROR" not in out
    for fragment in run["fragments"]:
        assert fragment in out
    assert not set(run["forbidden"]) & set(run["calls"])


@pytest.mark.parametrize("source", DUPLICATE_SOURCES)
def test_duplicate_case_ids_error_that_id_and_the_others_still_run(duplicates, source):
    run = duplicates[source]
    assert run["proc"].returncode == pytest.ExitCode.TESTS_FAILED
    assert run["record"] is not None, "no run record"
    cases = {c["case_id"]: c for c in run["record"]["cases"]}
    assert sorted(cases) == sorted([*run["intact"], "x"])  # one entry for the shared id, one per intact case
    assert all(cases[cid]["outcome"] == "passed" for cid in run["intact"])
    assert cases["x"]["outcome"] == "error" and cases["x"]["error"]["kind"] == "case"
    assert all(name in cases["x"]["error"]["message"] for name in run["names"])


# ====================================================================== 2. write cases
BASE_CASE_PATH = FIXTURES / "write_cases" / "acetaminophen-prn-range.json"  # every dosage field set
BASE_CASE = json.loads(BASE_CASE_PATH.read_text(encoding="utf-8"))
MISSING = "<missing>"
STR, NUM, BOOL, OBJ = "string", "number", "boolean", "object"

# The committed case format (tests/tasks/test_write_cases.py::test_case_format): each field's JSON
# type and whether null is a meaning of its own (no regimen, no range, no concentration).
E, D = ("expected",), ("expected", "dosage")
FIELDS: dict[tuple[str, ...], tuple[str, bool]] = {
    ("case_id",): (STR, False), ("subject",): (STR, False), ("note",): (STR, False), E: (OBJ, False),
    (*E, "rxnorm_code"): (STR, False), (*E, "display"): (STR, False), (*E, "status"): (STR, False),
    D: (OBJ, True),
    (*D, "dose"): (OBJ, False), (*D, "dose", "value"): (NUM, False), (*D, "dose", "unit"): (STR, False),
    (*D, "dose_max"): (OBJ, True), (*D, "dose_max", "value"): (NUM, False), (*D, "dose_max", "unit"): (STR, False),
    (*D, "frequency_per_day"): (NUM, False), (*D, "frequency_per_day_max"): (NUM, True),
    (*D, "as_needed"): (BOOL, False), (*D, "concentration_mg_per_ml"): (NUM, True),
    # nullable in the format, but required when a dosage is documented, as in this case
    (*E, "max_daily_dose"): (OBJ, False),
    (*E, "max_daily_dose", "value"): (NUM, False), (*E, "max_daily_dose", "unit"): (STR, False),
    (*E, "max_daily_dose", "ingredient"): (STR, False),
}
# absent means the same as null for these (a range's upper end, a liquid's concentration)
ABSENT_IS_NULL = {(*D, "dose_max"), (*D, "frequency_per_day_max"), (*D, "concentration_mg_per_ml")}
# provenance the harness never reads (the ceiling is value + unit): any value is scored
UNREAD = {(*E, "max_daily_dose", "ingredient")}
WRONG: dict[str, list[Any]] = {
    STR: [5, {"text": "x"}, ["x"], None],
    NUM: ["x", "325", {"value": 1}, [1], True, None],
    BOOL: ["yes", 1, {}, None],
    OBJ: ["x", 5, [], {}, None],  # {}: the right type with every key missing
}


def _field_paths(obj: Any, prefix: tuple = ()):
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield (*prefix, key)
            yield from _field_paths(value, (*prefix, key))


assert set(_field_paths(BASE_CASE)) == set(FIELDS), "the schema above must name every field of the base case"


def _expected(path: tuple, value: Any) -> str:
    _, nullable = FIELDS[path]
    if path in UNREAD:
        return "scored"
    if value == MISSING:
        return "scored" if path in ABSENT_IS_NULL else "error"
    if value is None:
        return "scored" if nullable else "error"
    return "error"


MUTATIONS: list[tuple[tuple, Any]] = [(path, value) for path in FIELDS for value in [MISSING, *WRONG[FIELDS[path][0]]]]
ROOT_MUTATIONS: list[Any] = [5, "x", [], None, {}]  # the case itself is not an object, or is empty


def _label(path: tuple, value: Any) -> str:
    shown = "missing" if value == MISSING else f"= {json.dumps(value)}"
    return f"{'.'.join(path)} {shown}"


def _mutated(index: int, path: tuple, value: Any) -> dict:
    case = copy.deepcopy(BASE_CASE)
    case["case_id"], case["subject"] = f"mut-{index:03d}", f"Patient/mut-{index:03d}"  # tags, set before the mutation
    target = case
    for key in path[:-1]:
        target = target[key]
    if value == MISSING:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return case


@pytest.fixture(scope="module")
def write_corpus(tmp_path_factory) -> dict[str, Any]:
    """One cases file: two intact copies of the base case around every mutation, run once."""
    project = tmp_path_factory.mktemp("write-corpus")
    (project / "test_write_evals.py").write_text(WRITE_EVAL)
    (project / "recording_agent.py").write_text(RECORDING_WRITE)
    controls = []
    for name in ("control-first", "control-last"):
        c = copy.deepcopy(BASE_CASE)
        c["case_id"], c["subject"] = name, f"Patient/{name}"
        controls.append(c)
    items = [controls[0], *(_mutated(i, p, v) for i, (p, v) in enumerate(MUTATIONS)), *ROOT_MUTATIONS, controls[1]]
    (project / "cases.json").write_text(json.dumps({"cases": items}))
    calls = project / "calls.txt"
    proc = _inner(project, "--write-cases", "cases.json", "--run-record", "record.json",
                  "--agent=recording_agent:Recording", env={"AGENT_CALLS": str(calls)})
    record = json.loads((project / "record.json").read_text())
    return {"proc": proc, "record": record, "items": items, "cases": {c["case_id"]: c for c in record["cases"]},
            "calls": [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []}


def _entry_for(run: dict[str, Any], index_in_file: int, case_id: Any) -> dict[str, Any]:
    """The record entry of the cases file's item ``index_in_file``: by its own id, else by the
    file-index id the harness gives an item without a usable one (``cases[i]``)."""
    for cid in (case_id if isinstance(case_id, str) else None, f"cases[{index_in_file}]", str(case_id)):
        if cid in run["cases"]:
            return run["cases"][cid]
    raise AssertionError(f"no record entry for item {index_in_file} ({case_id!r}): {sorted(run['cases'])[:20]}...")


def test_the_write_corpus_session_records_every_case_once_and_the_intact_ones_run(write_corpus):
    run = write_corpus
    out = run["proc"].stdout + run["proc"].stderr
    assert run["proc"].returncode == pytest.ExitCode.TESTS_FAILED, out[-3000:]
    assert "INTERNALERROR" not in out
    assert len(run["record"]["cases"]) == len(run["items"]) == len(MUTATIONS) + len(ROOT_MUTATIONS) + 2
    assert not [c for c in run["record"]["cases"] if (c["error"] or {}).get("kind") not in (None, "case")]
    for name in ("control-first", "control-last"):  # the intact cases around the broken ones still run, and pass
        assert run["cases"][name]["outcome"] == "passed", run["cases"][name]
        assert run["calls"].count(f"Patient/{name}") == 1
    known = {f"Patient/{n}" for n in ("control-first", "control-last")} | {
        f"Patient/mut-{i:03d}" for i in range(len(MUTATIONS))}
    assert set(run["calls"]) <= known, set(run["calls"]) - known  # nothing reached the agent under another name


@pytest.mark.parametrize("index, path, value", [
    pytest.param(i, p, v, id=_label(p, v)) for i, (p, v) in enumerate(MUTATIONS)])
def test_every_field_missing_or_wrong_typed_is_a_case_error_for_that_case_only(write_corpus, index, path, value):
    run = write_corpus
    item = run["items"][index + 1]
    case = _entry_for(run, index + 1, item.get("case_id", MISSING))
    tag = f"Patient/mut-{index:03d}"
    if _expected(path, value) == "error":
        error = case["error"] or {}
        assert case["outcome"] == "error" and error.get("kind") == "case", (case["outcome"], error, case["score"])
        assert error["message"].startswith(f"cases.json[{index + 1}]: "), error["message"]  # names the file and item
        assert path[-1] in error["message"], error["message"]  # and the field
        assert tag not in run["calls"]  # never sent to the agent
    else:  # a value the format allows (null / absent for an optional field, an unread field): scored
        assert case["outcome"] in ("passed", "failed") and case["score"] is not None, case["error"]
        assert run["calls"].count(tag) == 1


@pytest.mark.parametrize("offset, value", list(enumerate(ROOT_MUTATIONS)), ids=[json.dumps(v) for v in ROOT_MUTATIONS])
def test_an_item_that_is_not_a_case_object_is_a_case_error(write_corpus, offset, value):
    index = 1 + len(MUTATIONS) + offset
    case = write_corpus["cases"][f"cases[{index}]"]
    assert case["outcome"] == "error" and case["error"]["kind"] == "case", case
    assert case["error"]["message"].startswith(f"cases.json[{index}]: ")
    assert ("must be a JSON object" in case["error"]["message"] if value != {} else "lacks" in case["error"]["message"])


@pytest.mark.parametrize("cases, message", [
    ([5], "cases.json[0]: a write case must be a JSON object"),
    ([{}], "cases.json[0]: write case lacks ['case_id', 'subject', 'note', 'expected']"),
], ids=["number", "empty-object"])
def test_a_cases_file_holding_only_a_broken_case(pytester, monkeypatch, tmp_path, cases, message):
    pytester.makepyfile(test_w=WRITE_EVAL, recording_agent=RECORDING_WRITE)
    (pytester.path / "cases.json").write_text(json.dumps({"cases": cases}))
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("AGENT_CALLS", str(calls))
    result = pytester.runpytest("--write-cases", "cases.json", "--run-record", "record.json",
                                "-p", "no:cacheprovider", "--agent=recording_agent:Recording")
    result.assert_outcomes(errors=1)  # an errored case is a pytest error (issue 30 item 4)
    [case] = read_record(pytester)["cases"]
    assert case["case_id"] == "cases[0]" and case["outcome"] == "error" and case["error"]["kind"] == "case"
    assert case["error"]["message"].startswith(message), case["error"]["message"]
    assert not calls.exists()


# ====================================================================== 3. secrets
CANARY = "sk-canary-0123456789abcdef"
ANTHROPIC_CANARY = "sk-ant-canary-fedcba9876543210"

# The LangGraph agent through the real --agent=langgraph path (preflight, --model-cache), its
# chat model swapped for a scripted one that echoes the service key into every answer: the
# right list (with the key in prose); for HALLUCINATE_ON a code that *is* the key (so the
# scorer's reason carries it); for RAISE_ON an exception with both keys.
LEAKY_CONFTEST = '''
import glob, json, os, re
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pytest_groundeval.agents.langgraph_agent import LangGraphAgent
from pytest_groundeval.tasks.extraction import active_medications


# the LangGraph agent is given the patient id and tools, not the bundle: the scripted model
# reads the bundle it stands for from the data folder
BUNDLES = {}
for _path in glob.glob(os.path.join(os.path.dirname(__file__), "data", "*.json")):
    with open(_path, encoding="utf-8") as _fh:
        _bundle = json.load(_fh)
    BUNDLES[next(e["resource"]["id"] for e in _bundle["entry"] if e["resource"]["resourceType"] == "Patient")] = _bundle


class Leaky(BaseChatModel):
    @property
    def _llm_type(self):
        return "leaky-scripted"

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        key = os.environ["MY_SERVICE_API_KEY"]
        prompt = next(m.content for m in messages if m.type == "human")
        patient = re.search(r"Patient/([0-9a-f-]{36})", prompt).group(1)
        bundle = BUNDLES[patient]
        meds = active_medications(bundle, "prompt")
        if patient == os.environ["RAISE_ON"]:
            raise RuntimeError(f"auth failed for key {key} (and {os.environ['ANTHROPIC_API_KEY']})")
        if patient == os.environ["HALLUCINATE_ON"]:
            meds = meds + [{"code": key, "display": "leaked " + key}]
        text = "my key is " + key + "\\n" + json.dumps({"active_medications": meds})
        return ChatResult(generations=[ChatGeneration(message=AIMessage(
            content=text, usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}))])


LangGraphAgent._init_model = staticmethod(lambda *args, **kwargs: Leaky())
'''


def _patient_id(stem: str) -> str:
    return next(e["resource"]["id"] for e in _load(stem)["entry"] if e["resource"]["resourceType"] == "Patient")


@pytest.fixture(scope="module")
def leaky_run(tmp_path_factory) -> dict[str, Any]:
    """Cases in id order: ZERO passes, the next (hallucinated key) fails, STOPPED_ACTIVE raises:
    --maxfail 2 stops there, so the last case never runs and the journal is kept beside the
    record; the model-call cache holds the answers of the calls that returned."""
    project = tmp_path_factory.mktemp("leaky")
    (project / "test_evals.py").write_text(EXTRACTION_EVAL)
    (project / "conftest.py").write_text(LEAKY_CONFTEST)
    (project / "data").mkdir()
    for stem in SMALL_SET:
        shutil.copy(SYNTHEA / f"{stem}.json", project / "data" / f"{stem}.json")
    ordered = sorted(SMALL_SET)
    assert ordered[0] == ZERO and ordered[2] == STOPPED_ACTIVE
    proc = _inner(project, "--data-dir", "data", "--run-record", "record.json", "--junitxml", "out.xml",
                  "--agent=langgraph", "--model-cache", "readwrite", "--model-cache-dir", "cache",
                  "--concurrency", "1", "--maxfail", "2",
                  env={"MY_SERVICE_API_KEY": CANARY, "ANTHROPIC_API_KEY": ANTHROPIC_CANARY,
                       "HALLUCINATE_ON": _patient_id(ordered[1]), "RAISE_ON": _patient_id(STOPPED_ACTIVE)})
    return {"proc": proc, "project": project, "hallucinated": ordered[1]}


def test_the_leaky_run_echoed_the_key_and_the_record_and_journal_hold_only_the_mark(leaky_run):
    """The canary really went through the run (else the sink checks below prove nothing)."""
    proc, project = leaky_run["proc"], leaky_run["project"]
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, (proc.stdout + proc.stderr)[-3000:]
    record_text = (project / "record.json").read_text()
    journal_text = (project / "record.jsonl").read_text()  # cut short by --maxfail: the journal is kept
    for text in (record_text, journal_text, proc.stdout + proc.stderr):
        assert CANARY not in text and ANTHROPIC_CANARY not in text
    cases = {c["case_id"]: c for c in json.loads(record_text)["cases"]}
    assert cases[ZERO]["outcome"] == "passed" and cases[ZERO]["raw_output"].startswith(f"my key is {MARK}\n")
    assert cases[STOPPED_ACTIVE]["error"]["kind"] == "agent"
    assert f"auth failed for key {MARK} (and {MARK})" in cases[STOPPED_ACTIVE]["error"]["message"]


def test_junitxml_carries_no_key(leaky_run):
    project = leaky_run["project"]
    text = (project / "out.xml").read_text(encoding="utf-8")
    assert CANARY not in text and ANTHROPIC_CANARY not in text
    suite = ET.fromstring(text)
    every = [v for el in suite.iter() for v in (*el.attrib.values(), el.text or "", el.tail or "")]
    assert not [v for v in every if CANARY in v or ANTHROPIC_CANARY in v]  # attributes, properties, texts
    failures = {tc.get("name"): tc.find("failure") for tc in suite.iter("testcase")}
    errors = {tc.get("name"): tc.find("error") for tc in suite.iter("testcase")}  # errored cases (pytest/junit.py)
    hallucinated = failures[f"test_extraction[{leaky_run['hallucinated']}]"]
    raised = errors[f"test_extraction[{STOPPED_ACTIVE}]"]
    assert raised is not None and raised.get("type") == "groundeval.agent"
    assert f"hallucinated ['{MARK}']" in hallucinated.get("message") and f"['{MARK}']" in hallucinated.text
    assert f"auth failed for key {MARK} (and {MARK})" in raised.get("message")
    assert f"auth failed for key {MARK}" in raised.text


def _cache_files(project: Path) -> list[Path]:
    return sorted((project / "cache").glob("*/*.json"))


def test_model_cache_files_carry_no_key(leaky_run):
    files = _cache_files(leaky_run["project"])
    assert len(files) >= 2  # ZERO's answer and the hallucinated one (the raising call stores nothing)
    texts = [p.read_text(encoding="utf-8") for p in files]
    assert [p.name for p, t in zip(files, texts) if CANARY in t or ANTHROPIC_CANARY in t] == []
    assert all(MARK in t for t in texts)  # the echoed key is stored as the mark


def test_record_journal_and_cache_files_share_one_mode(leaky_run):
    project = leaky_run["project"]
    files = [project / "record.json", project / "record.jsonl", *_cache_files(project)]
    assert all(p.is_file() for p in files) and len(files) >= 4
    modes = {p.relative_to(project).as_posix(): oct(stat.S_IMODE(p.stat().st_mode)) for p in files}
    assert len(set(modes.values())) == 1, modes
