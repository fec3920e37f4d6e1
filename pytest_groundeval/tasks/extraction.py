"""Extraction: read a patient's active medications out of their FHIR bundle.

Ground truth comes from the very bundle the agent sees: every MedicationRequest with
status ``active`` that is not ``doNotPerform: true`` (FHIR R4 MedicationRequest.doNotPerform,
a modifier element: "the provider is asking for the medication request not to occur"),
identified by the coding whose system is RxNorm (not ``coding[0]``),
directly or through a ``medicationReference`` resolved inside the bundle. Distinct by
code. Anything that cannot be resolved makes the case an error, never a smaller truth.

Offline baseline: HealthChain's own readers (``load_bundle`` +
``get_medications(status="active")``), an independent cross-check of the truth code, not
a copy of it. Where the two disagree that is a finding (see FRICTION.md).

A case is a valid FHIR R4B Bundle: ``load`` validates it once with the checks of the loader
the baseline and the HealthChain tools use (``load_bundle(..., version="R4B")``; a bundle
they reject is rejected with HealthChain's own report), so a bundle HealthChain cannot read
(STU3 fields, a wrong type, a code outside a required value set) is a ``case`` error for
every agent, found before any agent is called -- not an ``agent`` error of the baseline
alone. Validation happens once per content hash (``fhir/bundles.py``: a process memo and
``.groundeval/bundles``; the bundled fixtures' verdicts ship with the package, ``fhir/shipped.py``;
cold bundles are validated ahead of the items, ``fhir/warmup.py``); the built Bundle is handed to the baseline and the tools (no
second parse) and is not built at all for a prompt-only agent when the verdict is stored.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, ClassVar, Mapping

import orjson

from pytest_groundeval.fhir import bundles
from pytest_groundeval.tasks.datasets import content_hash, discover_files, load_json
from pytest_groundeval.fhir.codes import REQUEST_ACTIVE, RXNORM
from pytest_groundeval.fhir.medications import distinct_codes, do_not_perform_ids, medication_requests, patient_reference
from pytest_groundeval.model import AgentOutput, Case, CaseError, CaseRef, CaseResult, ParseError
from pytest_groundeval.scorers import extraction as scorer
from pytest_groundeval.scorers.aggregate import code_set_specs
from pytest_groundeval.tasks import BUILTIN
from pytest_groundeval.run.prompt_cache import record_first
from pytest_groundeval.tasks.base import CaseSource, CaseView, Task, listed_codes_view
from pytest_groundeval.tasks.jsontext import one_answer, refuse_hedges, unknown_keys

ANSWER_KEY = "active_medications"

# the bundle comes first (run/prompt_cache.record_first): the same leading text for every
# task and repeat of the patient, which the prompt cache can serve
PROMPT = """You are given one patient's FHIR R4 Bundle (JSON) above.

List the patient's active medications: every MedicationRequest whose status is "active" \
(except a request with doNotPerform true: that one says not to take it), identified by its \
RxNorm code (coding system {rxnorm}). A medication may be given inline \
(medicationCodeableConcept) or by a medicationReference to a Medication resource in the bundle. \
List each RxNorm code once.

Answer with only a JSON object of this form, and nothing else:
{{"{key}": [{{"code": "<RxNorm code>", "display": "<RxNorm display name>"}}]}}
If the patient has no active medications, answer {{"{key}": []}}."""

# A tool-using agent (``--agent=langgraph``) is not given the bundle: it gets the patient
# id and read-only tools over this case's bundle only (:meth:`ExtractionTask.agent_tools`).
SYSTEM_PROMPT = """You read one patient's medications out of their FHIR R4 record with the \
tools provided; the record is reachable only through them. list_medication_requests lists the \
patient's MedicationRequests (filter by status; medicationReference already resolved, codes are \
RxNorm); read_resource reads one resource by reference. Never invent or recall a code: report \
only codes the tools returned. A tool's {"error": ...} result is a message to act on. Answer \
exactly in the JSON format the user's request asks for."""

TOOL_PROMPT = """Patient: {patient}

List this patient's active medications: every MedicationRequest whose status is "active" \
(except a request marked do_not_perform: that one says not to take it), identified by its \
RxNorm code (coding system {rxnorm}). Read them from the patient's FHIR \
record with the tools. List each RxNorm code once.

Answer with only a JSON object of this form, and nothing else:
{{"{key}": [{{"code": "<RxNorm code>", "display": "<RxNorm display name>"}}]}}
If the patient has no active medications, answer {{"{key}": []}}."""


def active_medications(bundle: Any, source: str) -> list[dict[str, str]]:
    """Ground truth for one bundle: ``[{code, display}]`` distinct by code, in bundle order."""
    codes = distinct_codes(medication_requests(bundle, source, REQUEST_ACTIVE))
    return [{"code": _shared(c), "display": _shared(d)} for c, d in codes.items()]


def _shared(text: Any) -> Any:
    """One string object for each code and display name however many cases hold it (a
    result keeps its truth and answer to the end of the run; patients share medications)."""
    return sys.intern(text) if type(text) is str else text


#: an item's keys: ``code`` (required), ``display`` and ``system`` (optional; RxNorm's if given)
ITEM_KEYS = ("code", "display", "system")


def parse_answer(text: str) -> list[dict[str, Any]]:
    """The answer's items ``[{code, display}]``, in order.

    One JSON object with only the answer's keys: ``active_medications``, a list of items each
    with a ``code`` (a non-empty string, or a JSON integer: its digits), an optional string
    ``display`` and an optional ``system`` that must be RxNorm's; any other key is a
    :class:`ParseError` (``unknown key: <path>``: ``"status": "stopped"`` beside an item says
    something the answer may not). The text around the object may repeat what it states (its
    codes, displays, the number of items) and nothing else (``jsontext.unstated_claims``: a
    code or number it does not list is a second answer), and says no listed medication is not
    active (``scorers.extraction.status_in_prose``)."""
    found = one_answer(text)
    obj = found.obj
    if ANSWER_KEY not in obj:
        raise ParseError(f"answer has no {ANSWER_KEY!r} key (top-level keys: {sorted(obj)})")
    unknown_keys(obj, (ANSWER_KEY,))
    items = obj[ANSWER_KEY]
    if not isinstance(items, list):
        raise ParseError(f"{ANSWER_KEY!r} is {type(items).__name__}, expected a list")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ParseError(f"{ANSWER_KEY}[{i}] is {type(item).__name__}, expected an object")
        unknown_keys(item, ITEM_KEYS, f"{ANSWER_KEY}[{i}].")
        if item.get("system") is not None and item["system"] != RXNORM:
            raise ParseError(f"{ANSWER_KEY}[{i}].system is {item['system']!r}, not RxNorm's {RXNORM}")
        code, display = item.get("code"), item.get("display")
        if isinstance(code, int) and not isinstance(code, bool) and code >= 0:
            code = str(code)  # a JSON integer is read as its digits (RxNorm codes are digit strings)
        if not isinstance(code, str) or not code.strip():
            raise ParseError(f"{ANSWER_KEY}[{i}].code is {code!r}, expected a non-empty string (or a JSON integer)")
        if display is not None and not isinstance(display, str):
            raise ParseError(f"{ANSWER_KEY}[{i}].display is {type(display).__name__}, expected a string")
        out.append({"code": _shared(code.strip()), "display": _shared(display)})
    refuse_hedges(found.prose, obj)
    said = scorer.status_in_prose(found.prose, out)
    if said:
        raise ParseError(f"hedge: the text around the answer {said}")
    return out


MAX_ISSUES = bundles.MAX_ISSUES  # validation issues a case error names (then "and N more")


def load_r4b_bundle(bundle: dict[str, Any], source: str, raw: bytes | None = None) -> Any:
    """``bundle`` (parsed JSON; ``raw``: its bytes, if known) as HealthChain loads it for the
    baseline and the agent tools: the ``fhir.resources`` R4B Bundle ``load_bundle(bundle,
    version="R4B")`` returns, validated once per content hash (``fhir/bundles.py``). A bundle
    it rejects is a :class:`CaseError` naming ``source`` and the first issues."""
    if raw is None:
        raw = orjson.dumps(bundle)
    verdict = bundles.verdict(raw, content_hash(raw), bundle)
    if not verdict.valid:
        raise CaseError(f"{source}: {verdict.issues}")
    return verdict.bundle()


class CaseInputs(dict):
    """A case's inputs whose ``"bundle"`` (the built R4B Bundle) is made on first use: a
    prompt-only agent never needs it, and a bundle whose verdict came from the on-disk memo
    is then never built at all."""

    def __init__(self, data: dict[str, Any], verdict: "bundles.Verdict") -> None:
        super().__init__(data)
        self._verdict = verdict

    def __missing__(self, key: str) -> Any:
        if key == "bundle" and self._verdict is not None:
            value = self._verdict.bundle()
            self["bundle"] = value
            self._verdict = None
            return value
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key) or (key == "bundle" and self._verdict is not None)


def healthchain_active_medications(bundle: Any) -> str:
    """The baseline's answer: HealthChain's reading of the bundle's active medications.
    ``bundle``: a loaded Bundle (:func:`load_r4b_bundle`), or the bundle's JSON text."""
    from healthchain.fhir import get_medications, load_bundle

    if isinstance(bundle, (str, dict)):
        bundle = load_bundle(bundle, version="R4B")
    meds: dict[str, str | None] = {}
    # HealthChain's readers do not look at doNotPerform (a modifier: "do not take"): the
    # baseline leaves those requests out itself (FRICTION.md D16)
    refused = do_not_perform_ids(bundle)
    for entry in get_medications(bundle, status="active"):
        if entry.resource_type == "MedicationRequest" and entry.code and entry.resource_id not in refused:
            meds.setdefault(entry.code, entry.display)
    return json.dumps({ANSWER_KEY: [{"code": c, "display": d} for c, d in meds.items()]})


class ExtractionTask(Task):
    name: ClassVar[str] = "extraction"
    description: ClassVar[str] = BUILTIN["extraction"].description
    source: ClassVar[CaseSource] = BUILTIN["extraction"].source
    # micro P/R/F1 (aliases f1, precision, recall), macro means, exact match, name accuracy, counts
    specs = tuple(code_set_specs())
    headline = "micro_f1"

    def discover(self) -> list[CaseRef]:
        return discover_files(self.path, self.name)

    def validated_bundles(self, ref: CaseRef) -> list[Path]:
        return [ref.path]

    def load(self, ref: CaseRef) -> Case:
        bundle, raw = load_json(ref.path)
        truth = active_medications(bundle, ref.path.name)  # first: its errors name the field
        digest = content_hash(raw)
        verdict = bundles.verdict(raw, digest, bundle)  # then what HealthChain can read: once per hash
        if not verdict.valid:
            raise CaseError(f"{ref.path.name}: {verdict.issues}")
        text = raw.decode("utf-8")
        return Case(
            ref=ref,
            prompt=record_first(text, PROMPT.format(rxnorm=RXNORM, key=ANSWER_KEY)),
            inputs=CaseInputs({"bundle_json": text}, verdict),
            truth=truth,
            content_hash=digest,
        )

    def parse(self, output: AgentOutput) -> Any:
        return parse_answer(output.text)

    def score(self, prediction: Any, case: Case):
        return scorer.score_extraction(prediction, case.truth)

    def unparsed(self, case: Case, reason: str):
        return scorer.unparsed(case.truth, reason)

    def summarize(self, results: list[CaseResult]) -> dict[str, Any]:
        return scorer.summarize(results)

    def baseline(self, inputs: dict[str, Any]) -> AgentOutput:
        loaded = inputs.get("bundle")  # validated and loaded once, by load()
        return AgentOutput(text=healthchain_active_medications(loaded if loaded is not None else inputs["bundle_json"]))

    # -- tool-using agents (--agent=langgraph): the bundle is reached through tools only --
    agent_system_prompt: ClassVar[str] = SYSTEM_PROMPT

    def agent_prompt(self, prompt: str, inputs: dict[str, Any]) -> str:
        """The request without the bundle: the patient id and what to answer (same JSON)."""
        return TOOL_PROMPT.format(patient=patient_reference(inputs["bundle_json"]),
                                  rxnorm=RXNORM, key=ANSWER_KEY)

    def agent_tools(self, inputs: dict[str, Any]) -> list[Any]:
        """``list_medication_requests`` and ``read_resource`` over THIS case's bundle only
        (a fresh list per case; HealthChain's FHIRToolkit over the loaded R4B Bundle)."""
        from pytest_groundeval.fhir.hc_tools import langchain_record_tools

        bundle = inputs.get("bundle")
        return langchain_record_tools(bundle if bundle is not None else inputs["bundle_json"])

    # -- grounding (grounding.py): the answer's codes a tool result must have supplied --
    def grounding_values(self, prediction: Any) -> dict[str, list[str]]:
        return {"code": [str(item["code"]) for item in prediction or []]}

    def grounding_checks(self, prediction: Any, case: Case, steps: list[Any]) -> list[Any]:
        """An empty list names no code for ``values`` to check: it is grounded only by a
        successful ``list_medication_requests`` of every request or of the active ones (not
        another status) whose result listed no active request to take."""
        if prediction is None or list(prediction):
            return []
        from pytest_groundeval.scorers.base import Check

        listed = [s for s in steps if s.ok and s.name == "list_medication_requests" and isinstance(s.result, dict)
                  and isinstance(s.result.get("medication_requests"), list)
                  and (not isinstance(s.args, dict) or s.args.get("status") in (None, "")
                       or str(s.args.get("status")).strip().lower() in REQUEST_ACTIVE)]
        if not listed:
            return [Check("looked", False, "answered no medication without a successful list_medication_requests "
                          "of all the requests or the active ones (another status, or another tool, is no look)")]
        active = [item for s in listed for item in s.result["medication_requests"] if isinstance(item, dict)
                  and str(item.get("status", "")).lower() in REQUEST_ACTIVE and not item.get("do_not_perform")]
        if active:
            return [Check("looked", False, f"answered no medication though list_medication_requests returned "
                          f"{len(active)} active request(s) (e.g. {active[0].get('code')})")]
        return [Check("looked", True, "listed the requests and none was active")]

    # -- the report: truth and answer are lists of {code, display} --
    @classmethod
    def view(cls, case: Mapping[str, Any]) -> CaseView:
        return listed_codes_view(case)
