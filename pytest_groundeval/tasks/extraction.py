"""Extraction: read a patient's active medications out of their FHIR bundle.

Ground truth comes from the very bundle the agent sees: every MedicationRequest with
status ``active``, identified by the coding whose system is RxNorm (not ``coding[0]``),
directly or through a ``medicationReference`` resolved inside the bundle. Distinct by
code. Anything that cannot be resolved makes the case an error, never a smaller truth.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from ..datasets import CaseError, CaseRef, content_hash, discover_files, load_json
from ..scorers import extraction as scorer
from .base import Case, ParseError, Task, extract_json_object

RXNORM = "http://www.nlm.nih.gov/research/umls/rxnorm"
ANSWER_KEY = "active_medications"

PROMPT = """You are given one patient's FHIR R4 Bundle (JSON) below.

List the patient's active medications: every MedicationRequest whose status is "active", \
identified by its RxNorm code (coding system {rxnorm}). A medication may be given inline \
(medicationCodeableConcept) or by a medicationReference to a Medication resource in the bundle. \
List each RxNorm code once.

Answer with only a JSON object of this form, and nothing else:
{{"{key}": [{{"code": "<RxNorm code>", "display": "<RxNorm display name>"}}]}}
If the patient has no active medications, answer {{"{key}": []}}.

Bundle:
{bundle}"""


def rxnorm_coding(concept: Any) -> dict[str, Any] | None:
    """The coding of a CodeableConcept whose system is RxNorm (first such), or None."""
    if not isinstance(concept, dict):
        return None
    for coding in concept.get("coding") or []:
        if isinstance(coding, dict) and coding.get("system") == RXNORM and coding.get("code"):
            return coding
    return None


def _resolve_medication(ref: str, request: dict, by_url: dict, by_type_id: dict) -> dict | None:
    if ref.startswith("#"):
        for contained in request.get("contained") or []:
            if isinstance(contained, dict) and contained.get("id") == ref[1:]:
                return contained
        return None
    if ref in by_url:
        return by_url[ref]
    if "/" in ref and not ref.startswith("urn:"):
        rtype, _, rid = ref.rpartition("/")
        return by_type_id.get((rtype.rsplit("/", 1)[-1], rid))
    return None


def active_medications(bundle: Any, source: str) -> list[dict[str, str]]:
    """Ground truth for one bundle: ``[{code, display}]`` distinct by code, in bundle order."""
    if not isinstance(bundle, dict) or bundle.get("resourceType") != "Bundle":
        kind = bundle.get("resourceType") if isinstance(bundle, dict) else type(bundle).__name__
        raise CaseError(f"{source}: not a FHIR Bundle (resourceType={kind!r})")
    resources: list[tuple[str | None, dict]] = []
    for entry in bundle.get("entry") or []:
        res = entry.get("resource") if isinstance(entry, dict) else None
        if isinstance(res, dict):
            resources.append((entry.get("fullUrl"), res))
    if not any(r.get("resourceType") == "Patient" for _, r in resources):
        raise CaseError(f"{source}: the Bundle has no Patient resource")
    by_url = {url: r for url, r in resources if url}
    by_type_id = {(r.get("resourceType"), r.get("id")): r for _, r in resources if r.get("id")}

    truth: dict[str, str] = {}
    for _, res in resources:
        if res.get("resourceType") != "MedicationRequest" or res.get("status") != "active":
            continue
        where = f"{source}: MedicationRequest/{res.get('id', '?')}"
        if "medicationCodeableConcept" in res:
            coding = rxnorm_coding(res["medicationCodeableConcept"])
        elif isinstance(res.get("medicationReference"), dict):
            ref = res["medicationReference"].get("reference") or ""
            med = _resolve_medication(ref, res, by_url, by_type_id)
            if med is None:
                raise CaseError(f"{where}: medicationReference {ref!r} cannot be resolved in the bundle")
            coding = rxnorm_coding(med.get("code"))
        else:
            raise CaseError(f"{where}: active request names no medication")
        if coding is None:
            raise CaseError(f"{where}: active medication has no RxNorm coding")
        truth.setdefault(str(coding["code"]), coding.get("display") or "")
    return [{"code": c, "display": d} for c, d in truth.items()]


def parse_answer(text: str) -> list[dict[str, Any]]:
    obj = extract_json_object(text)
    if ANSWER_KEY not in obj:
        raise ParseError(f"answer has no {ANSWER_KEY!r} key (top-level keys: {sorted(obj)})")
    items = obj[ANSWER_KEY]
    if not isinstance(items, list):
        raise ParseError(f"{ANSWER_KEY!r} is {type(items).__name__}, expected a list")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ParseError(f"{ANSWER_KEY}[{i}] is {type(item).__name__}, expected an object")
        code, display = item.get("code"), item.get("display")
        if not isinstance(code, str) or not code.strip():
            raise ParseError(f"{ANSWER_KEY}[{i}].code is {code!r}, expected a non-empty string")
        if display is not None and not isinstance(display, str):
            raise ParseError(f"{ANSWER_KEY}[{i}].display is {type(display).__name__}, expected a string")
        out.append({"code": code.strip(), "display": display})
    return out


class ExtractionTask(Task):
    name: ClassVar[str] = "extraction"
    description: ClassVar[str] = "read a patient's active medications (RxNorm) out of a FHIR bundle"
    metrics = scorer.SUMMARY_METRICS
    metric_aliases = {"f1": "micro_f1", "precision": "micro_precision", "recall": "micro_recall"}

    @classmethod
    def add_options(cls, group: Any, parser: Any) -> None:
        group.addoption(
            "--data-dir", dest="groundeval_data_dir", default=None, metavar="DIR",
            help="folder of Synthea FHIR bundles (.json / .json.gz) for the extraction suite "
            "(default: ini groundeval_data_dir, else fixtures/synthea)",
        )
        parser.addini("groundeval_data_dir", "extraction bundles folder", default="fixtures/synthea")

    @classmethod
    def from_config(cls, config: Any) -> "ExtractionTask":
        value = config.getoption("groundeval_data_dir") or config.getini("groundeval_data_dir")
        path = Path(value)
        if not path.is_absolute():
            base = Path.cwd() if config.getoption("groundeval_data_dir") else config.rootpath
            path = base / path
        return cls(options={"data_dir": str(path)})

    def discover(self) -> list[CaseRef]:
        return discover_files(Path(self.options["data_dir"]), self.name)

    def load(self, ref: CaseRef) -> Case:
        bundle, raw = load_json(ref.path)
        truth = active_medications(bundle, ref.path.name)
        text = raw.decode("utf-8")
        return Case(
            ref=ref,
            prompt=PROMPT.format(rxnorm=RXNORM, key=ANSWER_KEY, bundle=text),
            inputs={"bundle_json": text},
            truth=truth,
            content_hash=content_hash(raw),
        )

    def parse(self, text: str, structured: Any = None) -> Any:
        return parse_answer(text)

    def score(self, prediction: Any, case: Case):
        return scorer.score_extraction(prediction, case.truth)

    def summarize(self, results: list[dict[str, Any]]) -> dict[str, Any]:
        return scorer.summarize(results)
