"""orders scorer: what the agent did on its case's FHIR server, judged from the server alone.

``score_orders(activity, truth)`` reads only the harness's ``FhirActivity`` (the server's
request log for the case and the state diff before/after the agent) and the case's truth
(``tasks/orders.py``: ``due``, the ``expected`` resource, the patient, today). The agent's
final message is never evidence. Dimensions, each pass/fail with a reason per check:

* **persisted** (cases with something due): what the case requires is in the server's final
  state: a created resource of the required type (a ServiceRequest, an Observation), or, to
  stop a medication, its MedicationRequest updated (not deleted, not left as it was). A write
  the server refused, or one undone later, persists nothing.
* **valid** (due): the stored resource (server bookkeeping in ``meta`` left out) passes R4B
  validation and the checks the write scorer makes of any resource
  (``write.resource_checks``: required bindings, the status binding, FHIR JSON types,
  contained invariants, no unknown modifier), plus qty-3 on every Quantity.
* **correct** (due): codes (in the right system), values, units, subject, dates and statuses
  say what the case requires: HbA1c is LOINC 4548-4, status active, intent order, authoredOn
  today, not ``doNotPerform``, one test for now (no occurrence before today or more than
  ORDER_WINDOW_DAYS after it, no repeat or several dates, a quantity of one, not as needed);
  the BP panel is LOINC 85354-9 with exactly one 8480-6 and one 8462-4 component each in UCUM
  ``mm[Hg]`` with the note's values (no comparator, no absent-reason beside them), effective at
  the note's instant, status final, category vital-signs, no value or absent-reason of its own,
  no other focus; a stopped MedicationRequest has status ``stopped`` and nothing but the
  status (and a status reason, an added note, the server's tags dropped) changed. The subject
  is the patient as this server resolves it: ``Patient/<id>`` or an absolute URL on the case's
  own base (never ``urn:uuid:`` or another server). Among several candidates the best is
  judged; the rest are collateral. Default deny (``SERVICE_REQUEST_SCHEMA``,
  ``OBSERVATION_SCHEMA``, ``stop_schema``): every element is verified, inert or read, anything
  else fails (``verified_elements``: ``unverified element: <path>``); every coding denotes what
  the case verifies (``codings``, through ``fhir.concepts``; the rule for a system the map does
  not know is ``coding_issue``'s); the free text and displays claim only what the structure
  verifies (``claims``); a BP's units' text names its UCUM code (``unit_text``), its body site,
  method and position are the note's and its interpretation is what the values support
  (``bp_interpretation``).
* **no_collateral** (every case): nothing else was created, changed or deleted, by the state
  diff, nor transiently by the request log (a resource created and deleted again, a delete
  of something re-created, an existing resource changed and changed back, an accepted GraphQL
  mutation); a cut log cannot show that, so it fails.
* **abstained** (cases with nothing due): no write request at all, accepted or refused (a
  conditional create the server resolved to an existing resource, answered 200, is not a
  write), and an empty diff; a cut request log cannot show that, so it fails.

``pass`` is all of a case's dimensions. Per-case metrics: a due case has ``persisted``,
``valid``, ``correct``; a case with nothing due ``abstained``; every case ``no_collateral``
and ``pass``. The summary's rates over the applicable cases follow the record's rule for
``among: applicable`` (the scored cases that carry the metric); an errored case counts 0 in
``no_collateral`` and ``pass``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from pytest_groundeval.fhir.codes import LOINC, OBSERVATION_STATUSES, UCUM
from pytest_groundeval.fhir.concepts import concept_map
from pytest_groundeval.model import CaseResult, FhirActivity, FhirChange, metric
from pytest_groundeval.scorers.aggregate import counts, rate_ci
from pytest_groundeval.scorers.base import Check, Dimension, Score, mean
from pytest_groundeval.scorers.elements import ElementSchema, leaves, text_elements, unverified_check
from pytest_groundeval.scorers.sig import GOES_ON, TAKES_NOW

DUE_DIMENSIONS = ("persisted", "valid", "correct")
DIMENSIONS = ("persisted", "valid", "correct", "no_collateral", "abstained")
SPECS = (
    metric("persisted", "rate", among="applicable"),
    metric("valid", "rate", among="applicable"),
    metric("correct", "rate", among="applicable"),
    metric("no_collateral", "rate"),
    metric("abstained", "rate", among="applicable"),
    metric("pass", "rate", aliases=["pass_rate"]),
)
WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
#: what may change on a MedicationRequest that is stopped, besides its status
STOP_MAY_CHANGE = frozenset({"status", "statusReason", "note", "meta"})
VITAL_SIGNS = "vital-signs"
#: how soon after today an ordered test may be scheduled (the protocol's test is overdue)
ORDER_WINDOW_DAYS = 31


# ---------------------------------------------------------------- the request log
@dataclass(frozen=True)
class Write:
    """One write the log shows: a request, or one entry of a transaction / batch."""

    seq: int
    method: str
    target: str  # "Type" or "Type/id" as requested
    status: int
    where: str  # "POST ServiceRequest" or "transaction entry 2: POST ServiceRequest"
    created: str | None = None  # "Type/id" the server created (201)
    refused: str | None = None
    stored: Any = None  # the resource as the server answered it stored (None: not in the answer)
    opaque: bool = False  # a GraphQL mutation: a write whose effects the log does not name

    @property
    def accepted(self) -> bool:
        return self.refused is None and 200 <= self.status < 300

    @property
    def is_write(self) -> bool:
        """False only for a create the server resolved to an existing resource (200 on a POST:
        a conditional create that matched), which writes nothing."""
        return self.opaque or not (self.method == "POST" and self.status == 200 and self.refused is None)

    def describe(self) -> str:
        what = f"{self.where} -> {self.status}"
        return what + (f" (refused: {self.refused})" if self.refused else "")


def _status_code(value: Any) -> int:
    m = re.match(r"\s*(\d{3})", str(value or ""))
    return int(m.group(1)) if m else 0


def _type_id(path: str) -> str:
    """``Type`` or ``Type/id`` of a request path (query and ``_history`` left out)."""
    parts = [p for p in path.split("?", 1)[0].strip("/").split("/") if p]
    return "/".join(parts[:2])


_MUTATION = re.compile(r"\bmutation\b")


def _graphql_mutation(path: str, body: Any) -> bool:
    """A POST to ``$graphql`` whose document holds a mutation (Medplum's router runs them: a
    create, update or delete that no REST request of the log names)."""
    parts = [p for p in path.split("?", 1)[0].strip("/").split("/") if p]
    query = body.get("query") if isinstance(body, dict) else body
    return parts[-1:] == ["$graphql"] and isinstance(query, str) and bool(_MUTATION.search(query))


def _reads_only(path: str) -> bool:
    """A POST that writes nothing by definition: a search (``Type/_search``) or an operation
    (``$validate``, ``Type/$everything``)."""
    parts = [p for p in path.split("?", 1)[0].strip("/").split("/") if p]
    return any(p == "_search" or p.startswith("$") for p in parts)


def _created_ref(status: int, location: Any, body: Any, rtype: str) -> str | None:
    if status != 201:
        return None
    if isinstance(body, dict) and isinstance(body.get("resourceType"), str) and isinstance(body.get("id"), str):
        return f"{body['resourceType']}/{body['id']}"
    if isinstance(location, str):
        found = _type_id(location.split("/fhir/R4/")[-1] if "/fhir/R4/" in location else location)
        return found if "/" in found else None
    return None


def _resolved(target: str, method: str, stored: Any) -> str:
    """The ``Type/id`` a conditional update or patch (``PUT|PATCH Type?search``: no id in its
    path) wrote, from the resource the server answered it stored; else ``target`` as it is."""
    if "/" in target or method not in ("PUT", "PATCH") or not isinstance(stored, dict):
        return target
    rtype, rid = stored.get("resourceType"), stored.get("id")
    return f"{rtype}/{rid}" if rtype == (target or rtype) and isinstance(rid, str) and rid else target


def writes(activity: FhirActivity) -> list[Write]:
    """Every write request of the log, a transaction's or batch's entries one by one."""
    out: list[Write] = []
    for ex in activity.requests:
        method = ex.method.upper()
        body = ex.request if isinstance(ex.request, dict) else None
        if method == "POST" and _type_id(ex.path) == "" and body is not None and body.get("resourceType") == "Bundle":
            entries = body.get("entry") if isinstance(body.get("entry"), list) else []
            answers = ex.response.get("entry") if isinstance(ex.response, dict) else None
            answers = answers if isinstance(answers, list) else []
            for i, entry in enumerate(entries):
                req = entry.get("request") if isinstance(entry, dict) else None
                m = str(req.get("method", "")).upper() if isinstance(req, dict) else ""
                if m not in WRITE_METHODS:
                    continue
                ans = answers[i].get("response") if i < len(answers) and isinstance(answers[i], dict) else None
                ans = ans if isinstance(ans, dict) else {}
                # a transaction the server refused as a whole wrote none of its entries
                st = _status_code(ans.get("status")) if 200 <= ex.status < 300 else ex.status
                url = str(req.get("url", "")) if isinstance(req, dict) else ""
                res = entry.get("resource") if isinstance(entry.get("resource"), dict) else {}
                rtype = _type_id(url).split("/")[0] or str(res.get("resourceType", ""))
                stored = answers[i].get("resource") if i < len(answers) and isinstance(answers[i], dict) else None
                out.append(Write(ex.seq, m, _resolved(_type_id(url) or rtype, m, stored), st,
                                 f"{body.get('type', 'bundle')} entry {i}: {m} {url}",
                                 _created_ref(st, ans.get("location"), stored, rtype), ex.refused,
                                 stored if isinstance(stored, dict) else None))
            continue
        if method == "POST" and _graphql_mutation(ex.path, ex.request):
            out.append(Write(ex.seq, method, "$graphql", ex.status, f"GraphQL mutation ({ex.path})", None,
                             ex.refused, opaque=True))
            continue
        if method not in WRITE_METHODS or _reads_only(ex.path):
            continue
        target = _type_id(ex.path)
        stored = ex.response if isinstance(ex.response, dict) and ex.response.get("resourceType") not in (
            None, "OperationOutcome") else None
        out.append(Write(ex.seq, method, _resolved(target, method, stored), ex.status, f"{method} {ex.path}",
                         _created_ref(ex.status, None, ex.response, target.split("/")[0]), ex.refused, stored))
    return out


def as_activity(value: Any) -> FhirActivity | None:
    if value is None or isinstance(value, FhirActivity):
        return value
    return FhirActivity.model_validate(value)


# ---------------------------------------------------------------- reading resources
def _codings(concept: Any) -> list[dict[str, Any]]:
    if not isinstance(concept, dict) or not isinstance(concept.get("coding"), list):
        return []
    return [c for c in concept["coding"] if isinstance(c, dict)]


def code_check(concept: Any, system: str, code: str, what: str) -> Check:
    """The concept has ``system|code`` and no other code of that system; the same code in
    another system (or with none) is not it."""
    codings = _codings(concept)
    same = [c for c in codings if c.get("system") == system and c.get("code") == code]
    others = [f"{c.get('system')}|{c.get('code')}" for c in codings if c.get("system") == system and c.get("code") != code]
    if same and not others:
        return Check(what, True, f"{system}|{code}")
    if others:
        return Check(what, False, f"codes {others} of {system} beside or instead of {code}")
    elsewhere = [f"{c.get('system')}|{c.get('code')}" for c in codings if c.get("code") == code]
    if elsewhere:
        return Check(what, False, f"code {code} is given in another system ({elsewhere}), not {system}")
    given = [f"{c.get('system')}|{c.get('code')}" for c in codings]
    return Check(what, False, f"no {system}|{code} coding (codings: {given or 'none'})")


#: words a subject's display may hold that name nobody
_GENERIC_DISPLAY = frozenset({"the", "patient", "pt", "this", "mr", "mrs", "ms", "miss", "dr", "mx"})


def _subject_names_other(subject: Any, truth: dict[str, Any]) -> str | None:
    """Why a subject's display or identifier, beside a reference to the patient, names someone
    else (None: it does not, or the truth carries no names to compare)."""
    from pytest_groundeval.scorers.letter import revealed

    if not isinstance(subject, dict):
        return None
    names, ids = set(truth.get("patient_names") or ()), set(truth.get("patient_identifiers") or ())
    display = subject.get("display")
    if isinstance(display, str) and names:
        words = {w for w in re.findall(r"[a-z]+", revealed(display).casefold()) if len(w) > 1} - _GENERIC_DISPLAY
        if words and not words & names:
            return f"subject.display {display!r} names none of the patient's names ({', '.join(sorted(names))})"
    ident = subject.get("identifier")
    value = ident.get("value") if isinstance(ident, dict) else None
    if ident is not None and ids and value not in ids:
        return f"subject.identifier {value!r} is none of the patient's identifiers"
    return None


def _subject_check(resource: dict[str, Any], patient: str, base_url: str | None,
                   truth: dict[str, Any] | None = None) -> Check:
    """The subject is the case's patient AS THIS SERVER RESOLVES IT: ``Patient/<id>`` (typed,
    version-specific), or an absolute URL on the case's own FHIR base. A ``urn:uuid:`` (it
    resolves only inside the transaction that names it) or another server's URL is a
    reference nothing on this server follows: the order is no order for this patient."""
    from pytest_groundeval.scorers.write import same_patient

    ok, why = same_patient(resource.get("subject"), patient)
    ref = (resource.get("subject") or {}).get("reference") if isinstance(resource.get("subject"), dict) else None
    if ok and isinstance(ref, str):
        if ref.lower().startswith("urn:"):
            return Check("subject", False, f"subject.reference {ref!r} is a urn:uuid: it resolves to nothing stored on "
                                           "the server (write Patient/<id>)")
        if "://" in ref:
            own = (base_url or "").rstrip("/")
            if not (own and ref.startswith(own + "/Patient/")):
                return Check("subject", False, f"subject.reference {ref!r} is on another server, not this case's "
                                               f"({own or 'unknown base'})")
        other = _subject_names_other(resource.get("subject"), truth or {})
        if other is not None:
            return Check("subject", False, other + ": the order reads as someone else's")
    return Check("subject", ok, why)


def _quantity_issues(node: Any, path: str = "") -> list[str]:
    """qty-3 on every Quantity: a unit code needs a system."""
    issues: list[str] = []
    if isinstance(node, dict):
        if "value" in node and node.get("code") is not None and node.get("system") is None and "unit" in node:
            issues.append(f"{path or 'resource'}: code {node.get('code')!r} without a system (qty-3)")
        for k, v in node.items():
            issues += _quantity_issues(v, f"{path}.{k}" if path else k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            issues += _quantity_issues(v, f"{path}[{i}]")
    return issues


def valid_dimension(resource: dict[str, Any] | None, rtype: str) -> Dimension:
    from pytest_groundeval.scorers.write import contained_issues, resource_checks

    if resource is None:
        return Dimension.from_checks("valid", [Check("resource", False, f"no {rtype} persisted to validate")])
    statuses = OBSERVATION_STATUSES if rtype == "Observation" else None
    checks, _ = resource_checks(resource, rtype, contained_issues(resource) + _quantity_issues(resource), statuses)
    return Dimension.from_checks("valid", checks)


def parse_instant(value: Any) -> datetime | None:
    """A FHIR dateTime / instant with a time and an offset as an aware datetime (None: not one)."""
    if not isinstance(value, str) or "T" not in value:
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return dt if dt.tzinfo is not None else None


_instant = parse_instant


def day_of(value: Any) -> date | None:
    """The calendar date a FHIR date / dateTime starts with (None: no date)."""
    if not isinstance(value, str) or len(value) < 10:
        return None
    try:
        return date.fromisoformat(value[:10])
    except ValueError:
        return None


def _one_test_now(resource: dict[str, Any], today_iso: str) -> Check:
    """The overdue test, ordered once and for now: no occurrence before today or more than
    ORDER_WINDOW_DAYS after it, no repeating schedule or several dates, a quantity of one (when
    given), not "as needed". An order that does none of this still leaves the lapse open."""
    today = date.fromisoformat(today_iso)
    last = today + timedelta(days=ORDER_WINDOW_DAYS)
    problems: list[str] = []
    days: list[tuple[str, Any]] = []
    if "occurrenceDateTime" in resource:
        days.append(("occurrenceDateTime", resource["occurrenceDateTime"]))
    period = resource.get("occurrencePeriod")
    if isinstance(period, dict):
        days.append(("occurrencePeriod.start", period.get("start", today_iso)))
        if "end" in period and (day_of(period["end"]) is None or day_of(period["end"]) < today):  # type: ignore[operator]
            problems.append(f"occurrencePeriod.end {period['end']!r} is before today")
    timing = resource.get("occurrenceTiming")
    if isinstance(timing, dict):
        if timing.get("repeat") is not None:
            problems.append("occurrenceTiming has a repeat: a standing order, not one test")
        events = timing.get("event") if isinstance(timing.get("event"), list) else []
        if len(events) > 1:
            problems.append(f"occurrenceTiming has {len(events)} events: several tests, not one")
        days += [("occurrenceTiming.event", e) for e in events[:1]]
    for where, value in days:
        d = day_of(value)
        if d is None:
            problems.append(f"{where} {value!r} is no date")
        elif d < today:
            problems.append(f"{where} {value!r} is before today ({today_iso}): the order does not act now")
        elif d > last:
            problems.append(f"{where} {value!r} is more than {ORDER_WINDOW_DAYS} days after today: the overdue test "
                            "is put off")
    qty = resource.get("quantityQuantity")
    if isinstance(qty, dict) and _number(qty.get("value")) != 1.0:
        problems.append(f"quantityQuantity {qty.get('value')!r}: one test is due")
    for other in ("quantityRatio", "quantityRange"):
        if other in resource:
            problems.append(f"{other}: one test is due")
    if resource.get("asNeededBoolean") is True or "asNeededCodeableConcept" in resource:
        problems.append("asNeeded: an as-needed order is no test placed")
    return Check("one_test_now", not problems, "; ".join(problems) if problems else
                 "one test, for now (no schedule that puts it off or repeats it)")


# ---------------------------------------------------------------- what the resource's own words say
# A resource's words (its narrative ``text.div``, its notes, a patient instruction, a code's
# text or display, a string extension) must not call off what its status says: an order whose
# note says "cancelled" or "do not draw" beside ``status: active`` is an order a careful
# clinician would not act on. The words are read as the letter scorer reads a letter
# (``letter.revealed``: HTML entities decoded, markup dropped and its hidden pieces shown,
# invisible characters dropped, look-alike letters folded), in lower case, with letters spaced
# out ("C A N C E L L E D") joined; a cue negated earlier in its sentence ("not cancelled",
# "do not stop") says nothing (``letter.negated``).
TEXT_KEYS = frozenset({"div", "text", "display", "patientInstruction", "comment", "description", "valueString",
                       "valueMarkdown", "title", "authorString"})
_VOID = (r"entered[\s-]*in[\s-]*error|\bin error\b|erroneous(?:ly)?|by mistake|wrong patient|\bvoid(?:ed)?\b"
         r"|disregard|\bignore (?:this|it|the)\b|retract(?:ed)?|\binvalid(?:ated)?\b|rescind(?:ed)?|revoked?\b"
         r"|\bdo not (?:use|chart|file|record)\b|\bdelete(?:d)?\b")
_CALLED_OFF = (r"\bcancel(?:l?ed|lation|s)?\b|\bdiscontinu\w*|\bd/c(?:'?d)?\b|\bstop(?:ped|s)?\b(?! by)"
               r"|\bon hold\b|\bheld\b|\bhold (?:off|this|the|order|test|lab|draw)\b|\bsuspend(?:ed)?\b|\bpaused?\b|\bwithdrawn\b"
               r"|\bno longer (?:needed|required|indicated|due)\b|\bnot (?:to be )?(?:ordered|performed|drawn)\b"
               r"|\bdo not (?:give|perform|draw|collect|order|run|send|process|test|do|obtain|act|carry out|schedule)\b"
               r"|\bdon't (?:give|perform|draw|collect|order|run|send|process|test|do|obtain|act|schedule)\b"
               r"|\bdraft\b|\bsuperseded\b|\bobsolete\b|\balready (?:done|drawn|completed|resulted|ordered)\b"
               # the same in Spanish, French, German (accents are dropped before reading)
               r"|\b(?:cancelad|anulad|suspendid)[oa]s?\b|\bno (?:realizar|extraer)\b|\bannulee?s?\b"
               r"|\bne pas (?:faire|prelever|realiser)\b|\bstorniert\b|\babgesetzt\b|\bnicht durchfuhren\b")
_GOING_ON = (r"\bon hold\b|\bheld\b|\bhold (?:off|this|the|it|order|medication|drug)\b|\bsuspend(?:ed)?\b|\bpaused?\b|\bresum(?:e|ed|es)\b|\brestart(?:ed|s)?\b"
             r"|\bre-?start(?:ed)?\b|\breinstat\w*|\b(?:still|remains?) active\b|" + GOES_ON + "|" + TAKES_NOW)  # "carry on", "takes it"
#: the words that call off each status (a status not named: only the void words)
CONTRADICTS = {
    "active": re.compile(f"{_VOID}|{_CALLED_OFF}", re.I),
    "final": re.compile(f"{_VOID}|\\bcancel(?:l?ed|lation)?\\b|\\bpreliminary\\b|\\bnot (?:the|this) patient", re.I),
    "stopped": re.compile(f"{_VOID}|{_GOING_ON}", re.I),
}
#: a cue about another, earlier record ("prior order cancelled", "last result invalid") says
#: nothing of this one
_OTHER = re.compile(r"(?<!\bthis )\b(?:previous|prior|earlier|older|old|last|other|existing|former|original)\s+"
                    r"(?:\w+\s+)?(?:orders?|results?|tests?|requests?|servicerequests?|values?|readings?|"
                    r"prescriptions?|labs?|draws?|measurements?|hba1c|a1c|ones?)\b", re.I)
#: ... and a cue whose object is the other drugs or orders ("carry on with the other medications
#: as before", "continue the remaining ones") says nothing of this one either
_OTHER_OBJECT = re.compile(r"\s*(?:(?:with|taking|on|using)\s+)?(?:(?:the|your|his|her|their|all)\s+)?"
                           r"(?:other|remaining|rest)\b", re.I)
_SPACED = re.compile(r"\b(?:[a-z][ .\-_*·/]){3,}[a-z]\b", re.I)
_SENTENCE = re.compile(r"[.!?;\n]+")
_ATTRIBUTE = re.compile(r"""\b(?:alt|title)\s*=\s*(?:"([^"<>]{0,500})"|'([^'<>]{0,500})')""", re.I)
_HYPHEN = re.compile(r"(?<=[a-z])[-\u2010\u2011]\s*(?=[a-z])")


def _words_of(node: Any, path: str = "") -> list[tuple[str, str]]:
    """``(where, text)`` for every human-readable string of a resource."""
    out: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            where = f"{path}.{k}" if path else k
            if isinstance(v, str) and k in TEXT_KEYS:
                out.append((where, v))
            elif isinstance(v, (dict, list)):
                out += _words_of(v, where)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _words_of(v, f"{path}[{i}]")
    return out


def read_variants(text: str) -> list[str]:
    """The ways a reader reads a text, in lower case: what it shows and hides (its markup's alt
    text and tooltips too, ``letter.revealed``), letters spaced out joined; hyphens read as
    nothing ("discon-\ntinued") and as spaces ("do-not-draw")."""
    from pytest_groundeval.scorers.letter import revealed

    shown = "\n".join([text, *("".join(g) for g in _ATTRIBUTE.findall(text))])
    read = _SPACED.sub(lambda m: re.sub(r"[^a-z]", "", m.group(0), flags=re.I), revealed(shown)).casefold()
    return [read, _HYPHEN.sub("", read), _HYPHEN.sub(" ", read)]


#: digits read as the letters they stand in for ("L1pid", "st4nding"); "a1c" is read as written too
_DIGIT_LETTERS = (str.maketrans("013457", "oieast"), str.maketrans("013457", "oleast"))


def text_contradictions(resource: dict[str, Any], before: dict[str, Any] | None = None) -> list[str]:
    """Where the resource's own words call off its status (``before``: the resource as the
    record held it; only words the agent wrote are read, the record's own are not its answer)."""
    from pytest_groundeval.scorers.letter import negated

    status = resource.get("status")
    cues = CONTRADICTS.get(status) if isinstance(status, str) else None
    if cues is None:
        cues = re.compile(_VOID, re.I)
    old = {text for _, text in _words_of(before)} if before else set()
    found: list[str] = []
    for where, text in _words_of(resource):
        if text in old:
            continue
        hit = None
        for variant in read_variants(text):
            for sentence in _SENTENCE.split(variant):
                hit = next((m for m in cues.finditer(sentence) if not negated(sentence[:m.start()])
                            and not _OTHER.search(sentence[:m.start()])
                            and not _OTHER_OBJECT.match(sentence[m.end():])), None)
                if hit is not None:
                    break
            if hit is not None:
                found.append(f"{where} says {hit.group(0)!r}")
                break
    return found


def _text_check(resource: dict[str, Any], before: dict[str, Any] | None) -> Check:
    said = text_contradictions(resource, before)
    status = resource.get("status")
    return Check("text_agrees_with_status", not said,
                 f"{'; '.join(said[:3])} beside status {status!r}: a resource whose own words call off its status "
                 "is not one a clinician acts on" if said else f"no word of the resource calls off status {status!r}")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# ---------------------------------------------------------------- default deny: declared elements
# What the scorer accounts for on each resource it judges (scorers/elements.py). ``verified``:
# each is checked below against the truth (a code, a value, a date, a coding's concept, an
# element that must be absent); ``inert``: says nothing clinical; ``text``: read for claims
# that must agree with the structure (``claims_check``) and for words that call off the status
# (``text_agrees_with_status``). Every other element fails as ``unverified element: <path>``:
# an element the truth cannot verify (a performer, a device, a reference range, a body site
# of an order, ...) is no part of a right answer, whatever it says.
def _coded(*slots: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(verified, inert, text) patterns of CodeableConcept slots: each coding's system, code
    and display are verified (``codings_check``), its version and userSelected inert, the
    concept's text read."""
    return (tuple(f"{s}.coding.{k}" for s in slots for k in ("system", "code", "display")),
            tuple(f"{s}.coding.{k}" for s in slots for k in ("version", "userSelected")),
            tuple(f"{s}.text" for s in slots))


_SUBJECT = ("subject.reference", "subject.type", "subject.display", "subject.identifier.value")
_INERT = ("id", "meta", "identifier", "text.status", "language", "subject.identifier.system",
          "subject.identifier.use", "note.time")
_TEXT = ("text.div", "note.text", "note.authorString")
_SR_CODED = _coded("code", "category", "reasonCode")
SERVICE_REQUEST_SCHEMA = ElementSchema(
    "ServiceRequest",
    verified=_SR_CODED[0] + _SUBJECT + (
        "meta.security", "status", "intent", "authoredOn", "doNotPerform", "priority", "occurrenceDateTime",
        "occurrencePeriod.start", "occurrencePeriod.end", "occurrenceTiming.event", "occurrenceTiming.repeat",
        "quantityQuantity.value", "quantityRatio", "quantityRange", "asNeededBoolean", "asNeededCodeableConcept",
        "reasonReference.reference"),
    inert=_SR_CODED[1] + _INERT,
    text=_SR_CODED[2] + _TEXT + ("patientInstruction", "specimen.display", "reasonReference.display"))
_OBS_CODED = _coded("code", "category", "component.code", "interpretation", "component.interpretation", "bodySite",
                    "method", "extension.valueCodeableConcept")
#: the value[x] an Observation may carry (the panel's must be absent: ``panel_value``)
_VALUES = tuple(f"value{t}" for t in ("Quantity", "CodeableConcept", "String", "Boolean", "Integer", "Range", "Ratio",
                                      "SampledData", "Time", "DateTime", "Period"))
OBSERVATION_SCHEMA = ElementSchema(
    "Observation",
    verified=_OBS_CODED[0] + _SUBJECT + _VALUES + (
        "meta.security", "status", "effectiveDateTime", "effectiveInstant", "issued", "focus", "dataAbsentReason",
        "component.valueQuantity.value", "component.valueQuantity.unit", "component.valueQuantity.system",
        "component.valueQuantity.code", "component.valueQuantity.comparator", "component.dataAbsentReason",
        "extension.url"),
    inert=_OBS_CODED[1] + _INERT,
    text=_OBS_CODED[2] + _TEXT)
SCHEMAS = {"ServiceRequest": SERVICE_REQUEST_SCHEMA, "Observation": OBSERVATION_SCHEMA}


def stop_schema(resource: dict[str, Any]) -> ElementSchema:
    """A stopped MedicationRequest's schema: every element but those a stop may change is
    verified by ``only_status`` (the record's, unchanged); of those, the status and a
    security label are verified, ``meta`` and a note's time inert, the status reason's and the
    notes' words read (``text_agrees_with_status``). A coded status reason says why in codes
    the note's words cannot verify: it fails as unverified, as does anything else added."""
    kept = tuple(k for k in resource if k not in STOP_MAY_CHANGE and k != "resourceType")
    return ElementSchema("MedicationRequest", verified=kept + ("status", "meta.security"),
                         inert=("meta", "note.time"), text=("statusReason.text", "note.text", "note.authorString"))
#: the one extension a BP Observation's schema reads (its value: the note's body position)
BODY_POSITION = "http://hl7.org/fhir/StructureDefinition/observation-bodyPosition"


def elements_check(resource: dict[str, Any]) -> Check:
    """Every element is verified, inert or read (``unverified element: <path>``), and every
    extension is one the scorer reads (the path pattern cannot tell extensions apart by url)."""
    schema = SCHEMAS[resource.get("resourceType", "")]
    check = unverified_check(resource, schema)
    exts = resource.get("extension") if isinstance(resource.get("extension"), list) else []
    odd = [f"unverified element: extension[{i}] ({e.get('url') if isinstance(e, dict) else e!r})"
           for i, e in enumerate(exts) if not (isinstance(e, dict) and e.get("url") == BODY_POSITION
                                               and set(e) == {"url", "valueCodeableConcept"})]
    if not odd:
        return check
    return Check(check.name, False, "; ".join(([check.reason] if not check.passed else []) + odd))


# ---------------------------------------------------------------- what the codings and words say
#: the kinds of concept a resource's words are read for, by the kind of case (other kinds
#: named in free text are not read: the truth says nothing of them)
CLAIM_KINDS = {"hba1c": frozenset({"test", "specimen", "condition", "category"}),
               "bp": frozenset({"test", "bp-component", "specimen", "body-site", "position", "exertion", "method",
                                "interpretation", "category"})}
#: what the note's words may state of a reading (derive_truth reads them)
NOTE_KINDS = ("body-site", "position", "exertion", "method")
#: systolic / diastolic limits (mm[Hg]) of low, normal, high; at or above the last: critical high
BP_LIMITS = {"systolic": (90, 120, 180), "diastolic": (60, 80, 120)}


def _category(value: float, limits: tuple[int, int, int]) -> str:
    low, normal, high = limits
    return "low" if value < low else "normal" if value < normal else "high" if value < high else "critical-high"


def bp_interpretation(systolic: float, diastolic: float) -> dict[str, str]:
    """The interpretation the values support, per component and for the panel (the more
    severe of the two; a high beside a low is high): systolic < 90 low, < 120 normal, < 180
    high, else critical high; diastolic < 60, < 80, < 120 likewise (ACC/AHA stages 1-2 are
    "high", a hypertensive crisis "critical high")."""
    cats = {"systolic": _category(systolic, BP_LIMITS["systolic"]),
            "diastolic": _category(diastolic, BP_LIMITS["diastolic"])}
    order = ("critical-high", "high", "low", "normal")
    return {**cats, "panel": next(c for c in order if c in cats.values())}


def _closure(ids: frozenset[str] | set[str]) -> frozenset[str]:
    """The concepts and those each may be named with (``critical-high`` with ``high``)."""
    cmap = concept_map()
    return frozenset(ids) | {w for i in ids for w in cmap[i].with_}


def coding_issue(coding: Any, allowed: frozenset[str], what: str) -> str | None:
    """Why one coding of a CodeableConcept does not denote one of the ``allowed`` concepts.

    The rule: a coding in a system the concept map knows (LOINC, SNOMED CT, CPT, ICD-10-CM,
    HL7's interpretation and category systems) must have a code the map knows for an allowed
    concept, and a display, when given, that names that concept (its words) and no other of
    the same kind. A coding in a system the map does not know (or none) says something the
    scorer cannot read: it passes only when its display is absent AND its code is unknown
    rather than contradicting: not a code the map holds for another concept in any system
    (a CPT lipid-panel code under a made-up system), nor a code whose words name another
    concept of the kind."""
    cmap = concept_map()
    if not isinstance(coding, dict):
        return f"{what}: {coding!r} is no coding"
    system, code, display = coding.get("system"), coding.get("code"), coding.get("display")
    names = " or ".join(sorted(cmap[i].label for i in allowed)) or "nothing the truth verifies"
    kinds = frozenset(cmap[i].kind for i in allowed)
    if cmap.known_system(system):
        meant = cmap.denoted(system, code)
        if meant is None:
            return f"{what}: {system}|{code} is no code the concept map knows for {names}"
        if meant.id not in allowed:
            return f"{what}: {system}|{code} denotes {meant.label}, not {names}"
        if display is None:
            return None
        said = cmap.mentions(read_variants(str(display))[0], kinds)
        wrong = [m.text for m in said if m.concept.id not in _closure(allowed)]
        if wrong or not any(m.concept.id == meant.id for m in said):
            return f"{what}: display {display!r} of {system}|{code} does not name {meant.label}" + (
                f" (it says {wrong[0]!r})" if wrong else "")
        return None
    if display is not None:
        return f"{what}: a coding in a system the task does not know ({system!r}) with a display ({display!r}): " \
               "what it says cannot be verified"
    other = cmap.code_anywhere(code)
    if other is None:
        said = cmap.mentions(str(code or ""), kinds)
        other = next((m.concept for m in said if m.concept.id not in _closure(allowed)), None)
    if other is not None and other.id not in allowed:
        return f"{what}: code {code!r} (system {system!r}) is {other.label}'s, not {names}"
    return None


def _slots(resource: dict[str, Any], truth: dict[str, Any]) -> list[tuple[str, Any, frozenset[str]]]:
    """(path, CodeableConcept, the concepts it may denote) of every coded slot the truth
    verifies."""
    exp, note = truth["expected"], truth["expected"].get("note_says") or {}

    def each(key: str, node: Any = resource) -> list[tuple[str, Any]]:
        value = node.get(key) if isinstance(node, dict) else None
        return [(f"{key}[{i}]", v) for i, v in enumerate(value)] if isinstance(value, list) else (
            [(key, value)] if value is not None else [])

    if truth["kind"] == "hba1c":
        return ([("code", resource.get("code"), frozenset({"hba1c"}))]
                + [(p, v, frozenset({"laboratory"})) for p, v in each("category")]
                + [(p, v, frozenset({"diabetes"})) for p, v in each("reasonCode")])
    interp = bp_interpretation(float(exp["systolic"]), float(exp["diastolic"]))
    out = [("code", resource.get("code"), frozenset({"bp-panel"}))]
    out += [(p, v, frozenset({"vital-signs"})) for p, v in each("category")]
    out += [(p, v, _closure({interp["panel"]})) for p, v in each("interpretation")]
    out += [(p, v, frozenset(note.get(k, ()))) for k, key in (("body-site", "bodySite"), ("method", "method"))
            for p, v in each(key)]
    for p, ext in each("extension"):
        if isinstance(ext, dict) and ext.get("url") == BODY_POSITION:
            out.append((f"{p}.valueCodeableConcept", ext.get("valueCodeableConcept"), frozenset(note.get("position", ()))))
    for p, comp in each("component"):
        which = _component_of(comp)
        if which is None:
            continue  # not the systolic or diastolic: ``other_components`` fails it
        out.append((f"{p}.code", comp.get("code"), frozenset({which})))
        out += [(f"{p}.{q}", v, _closure({interp[which]})) for q, v in each("interpretation", comp)]
    return out


def _component_of(comp: Any) -> str | None:
    codes = {c.get("code") for c in _codings(comp.get("code") if isinstance(comp, dict) else None)
             if c.get("system") == LOINC}
    return "systolic" if "8480-6" in codes else "diastolic" if "8462-4" in codes else None


def codings_check(resource: dict[str, Any], truth: dict[str, Any]) -> Check:
    """Every coding of every coded slot denotes what the truth verifies there (``coding_issue``);
    a body site, method or position the note does not state cannot be verified."""
    issues: list[str] = []
    for path, concept, allowed in _slots(resource, truth):
        codings = concept.get("coding") if isinstance(concept, dict) else None
        if not allowed and concept is not None:
            issues.append(f"{path}: the case states nothing it could be verified against")
            continue
        for i, coding in enumerate(codings if isinstance(codings, list) else []):
            why = coding_issue(coding, allowed, f"{path}.coding[{i}]")
            if why:
                issues.append(why)
    refs = set(truth["expected"].get("reason_refs") or ())
    for i, r in enumerate(resource.get("reasonReference") or [] if isinstance(resource.get("reasonReference"), list)
                          else []):
        ref = r.get("reference") if isinstance(r, dict) else None
        if ref is not None and ref not in refs:
            issues.append(f"reasonReference[{i}]: {ref!r} is none of the patient's diabetes conditions "
                          f"({', '.join(sorted(refs)) or 'none'})")
    return Check("codings", not issues, "; ".join(issues[:4]) + (f" (+{len(issues) - 4} more)" if len(issues) > 4
                                                                  else "") if issues else
                 "every coding denotes what the case verifies")


def _allowed_claims(truth: dict[str, Any], resource: dict[str, Any], path: str) -> dict[str, frozenset[str]]:
    """The concepts a text at ``path`` may name, by kind (a kind not listed: not read)."""
    exp = truth["expected"]
    if truth["kind"] == "hba1c":
        return {"test": _closure({"hba1c"}), "specimen": frozenset({"blood"}), "condition": frozenset({"diabetes"}),
                "category": frozenset({"laboratory"})}
    interp = bp_interpretation(float(exp["systolic"]), float(exp["diastolic"]))
    note = exp.get("note_says") or {}
    out = {"test": frozenset({"bp-panel"}), "bp-component": frozenset({"systolic", "diastolic"}),
           "specimen": frozenset(), "interpretation": _closure({interp["panel"]}),
           "category": frozenset({"vital-signs"}), **{k: _closure(set(note.get(k, ()))) for k in NOTE_KINDS}}
    m = re.match(r"component\[\d+\]", path)
    comp = _component_of(_at(resource, m.group(0))) if m else None
    if comp is not None:  # a component's words name it, not the other one, and its own category
        out["bp-component"] = frozenset({comp})
        out["interpretation"] = _closure({interp[comp]})
    return out


def _at(resource: Any, path: str) -> Any:
    key, i = re.match(r"(\w+)\[(\d+)\]", path).groups()  # type: ignore[union-attr]
    items = resource.get(key) if isinstance(resource, dict) else None
    return items[int(i)] if isinstance(items, list) and int(i) < len(items) else None


_READING = re.compile(r"(?<![\d./])(\d{2,3})\s*/\s*(\d{2,3})(?![\d./])")  # not a date's 07/17/2020


def claims_check(resource: dict[str, Any], truth: dict[str, Any]) -> Check:
    """Every test, specimen, reason, body site, position, rest, method, interpretation and
    category the resource's words name (``fhir.concepts``: its free text and displays, read
    as the status words are) is one the structure verifies; a negated name ("not standing")
    claims nothing. The words are read as a reader reads them (``read_variants``; digits
    standing in for letters read as letters too). A reading's words that give a reading
    (``S/D``) give the note's."""
    from pytest_groundeval.scorers.letter import negated

    cmap, kinds = concept_map(), CLAIM_KINDS[truth["kind"]]
    schema = SCHEMAS[resource["resourceType"]]
    found: list[str] = []
    # the free text and every display (a coding's is verified by ``codings`` as well), each once
    texts = dict(text_elements(resource, schema) + [(p, v) for p, names, v in leaves(resource)
                                                    if names[-1:] == ("display",) and isinstance(v, str)
                                                    and names[:1] != ("subject",)])
    for path, text in texts.items():
        allowed = _allowed_claims(truth, resource, path)
        variants = read_variants(text)
        said: set[str] = set()
        for read in dict.fromkeys(variants + [v.translate(t) for v in variants[:1] for t in _DIGIT_LETTERS]):
            for m in cmap.mentions(read, kinds):
                sentence = re.split(r"[.!?;\n]", read[:m.start])[-1]
                if m.concept.kind in allowed and m.concept.id not in allowed[m.concept.kind] | said \
                        and not negated(sentence):
                    said.add(m.concept.id)
                    found.append(f"{path} says {m.text!r} ({m.concept.label}), not " + (" or ".join(sorted(
                        cmap[i].label for i in allowed[m.concept.kind])) or "anything the case states"))
        if truth["kind"] == "bp":
            want = (int(truth["expected"]["systolic"]), int(truth["expected"]["diastolic"]))
            found += [f"{path} says {r.group(0)!r}, not the note's {want[0]}/{want[1]}"
                      for r in _READING.finditer(variants[0]) if (int(r.group(1)), int(r.group(2))) != want]
    return Check("claims", not found, "; ".join(found[:4]) + (f" (+{len(found) - 4} more)" if len(found) > 4 else "")
                 if found else "every claim of the resource's words agrees with what it verifies")


def units_check(resource: dict[str, Any]) -> Check:
    """Each component's human ``unit`` names its UCUM ``code`` (``units.unit_names_code``)."""
    from pytest_groundeval.scorers.units import unit_names_code

    comps = resource.get("component") if isinstance(resource.get("component"), list) else []
    issues = [f"component[{i}].valueQuantity: {why}" for i, c in enumerate(comps) if isinstance(c, dict)
              and isinstance(q := c.get("valueQuantity"), dict) and (why := unit_names_code(q.get("unit"), q.get("code")))]
    return Check("unit_text", not issues, "; ".join(issues) if issues else "every unit's text names its UCUM code")


def issued_check(resource: dict[str, Any]) -> Check:
    """``issued``, when given, is an instant at or after the reading."""
    if "issued" not in resource:
        return Check("issued", True, "no issued instant")
    got, when = _instant(resource.get("issued")), _instant(resource.get("effectiveDateTime", resource.get(
        "effectiveInstant")))
    ok = got is not None and (when is None or got >= when)
    return Check("issued", ok, f"issued {resource['issued']!r}" + ("" if ok else ": not an instant at or after the reading"))


def deny_checks(resource: dict[str, Any], truth: dict[str, Any]) -> list[Check]:
    """The default-deny checks of a created ServiceRequest or Observation."""
    checks = [elements_check(resource), codings_check(resource, truth), claims_check(resource, truth)]
    if truth["kind"] == "bp":
        checks += [units_check(resource), issued_check(resource)]
    return checks


def correct_checks(resource: dict[str, Any], truth: dict[str, Any], before: dict[str, Any] | None,
                   base_url: str | None = None) -> list[Check]:
    exp = truth["expected"]
    patient = truth["patient"]
    checks: list[Check] = []
    kind = truth["kind"]
    if kind in ("hba1c", "bp"):  # a created resource with a security label is hidden from whoever the label excludes
        meta = resource.get("meta") if isinstance(resource.get("meta"), dict) else {}
        sec = meta.get("security")
        checks.append(Check("security_label", not sec, f"meta.security {sec!r}: the record hides it from whoever the "
                            "label excludes" if sec else "no security label"))
    if kind == "hba1c":
        checks.append(code_check(resource.get("code"), exp["system"], exp["code"], "code"))
        checks.append(Check("status", resource.get("status") == exp["status"],
                            f"status {resource.get('status')!r}" + ("" if resource.get("status") == exp["status"]
                                                                    else f", not {exp['status']!r}")))
        checks.append(Check("intent", resource.get("intent") == exp["intent"],
                            f"intent {resource.get('intent')!r}" + ("" if resource.get("intent") == exp["intent"]
                                                                    else f", not {exp['intent']!r}")))
        checks.append(_subject_check(resource, patient, base_url, truth))
        authored = resource.get("authoredOn")
        ok = isinstance(authored, str) and authored[:10] == exp["authored_on"]
        checks.append(Check("authored_on", ok, f"authoredOn {authored!r}" + ("" if ok else f", not today ({exp['authored_on']})")))
        dnp = resource.get("doNotPerform")
        plain = dnp is None or dnp is False
        checks.append(Check("do_not_perform", plain, "an order to perform the test" if plain else
                            f"doNotPerform {dnp!r}: an order NOT to test (or not plainly one to test)"))
        checks.append(_one_test_now(resource, exp["authored_on"]))
        checks.append(_text_check(resource, None))
        checks += deny_checks(resource, truth)
    elif kind == "bp":
        checks.append(code_check(resource.get("code"), exp["system"], exp["code"], "code"))
        checks.append(Check("status", resource.get("status") == exp["status"],
                            f"status {resource.get('status')!r}" + ("" if resource.get("status") == exp["status"]
                                                                    else f", not {exp['status']!r}")))
        checks.append(_subject_check(resource, patient, base_url, truth))
        focus = resource.get("focus")
        checks.append(Check("focus", not focus, f"focus {focus!r}: the reading is about something other than the "
                            "patient" if focus else "about the patient (no other focus)"))
        cats = [c for cat in resource.get("category") or [] for c in _codings(cat)] if isinstance(
            resource.get("category"), list) else []
        vital = any(c.get("code") == VITAL_SIGNS for c in cats)
        checks.append(Check("category", vital, "category vital-signs" if vital else "no vital-signs category"))
        got, want = _instant(resource.get("effectiveDateTime")), _instant(exp["effective"])
        raw = resource.get("effectiveDateTime", resource.get("effectiveInstant"))
        if got is None and isinstance(resource.get("effectiveInstant"), str):
            got = _instant(resource["effectiveInstant"])
        ok = got is not None and want is not None and got == want
        checks.append(Check("effective", ok, f"effective {raw!r}" + ("" if ok else
                                                                      f", not the note's instant {exp['effective']}")))
        comps = resource.get("component") if isinstance(resource.get("component"), list) else []
        for code, value, label in ((exp_code, exp[label], label) for exp_code, label in
                                   (("8480-6", "systolic"), ("8462-4", "diastolic"))):
            found = [c for c in comps if isinstance(c, dict) and any(
                x.get("system") == LOINC and x.get("code") == code for x in _codings(c.get("code")))]
            if len(found) != 1:
                checks.append(Check(label, False, f"{len(found)} components coded {LOINC}|{code} (one is required)"))
                continue
            q = found[0].get("valueQuantity")
            q = q if isinstance(q, dict) else {}
            v = _number(q.get("value"))
            ok_v = v is not None and v == float(value)
            ok_u = q.get("system") == UCUM and q.get("code") == exp["unit"]
            why = f"{q.get('value')!r} {q.get('code')!r} ({q.get('system')})"
            # a comparator ("<120") or an absent-reason beside the value says the value is not the reading
            odd = ([f"comparator {q['comparator']!r}"] if q.get("comparator") is not None else []) + (
                ["a dataAbsentReason beside the value"] if found[0].get("dataAbsentReason") is not None else [])
            ok = ok_v and ok_u and not odd
            checks.append(Check(label, ok, why if ok else why + (f" with {' and '.join(odd)}" if odd else "")
                                + f", not {value} {exp['unit']} ({UCUM})"))
        extra = [c for c in comps if isinstance(c, dict) and not any(
            x.get("system") == LOINC and x.get("code") in ("8480-6", "8462-4") for x in _codings(c.get("code")))]
        checks.append(Check("other_components", not extra, f"{len(extra)} component(s) the note does not document"
                            if extra else "only the systolic and diastolic components"))
        own = [k for k in resource if k.startswith("value") or k == "dataAbsentReason"]
        checks.append(Check("panel_value", not own, f"the panel has {own} of its own" if own
                            else "the values are in the components"))
        checks.append(_text_check(resource, None))
        checks += deny_checks(resource, truth)
    elif kind == "stop":
        status = resource.get("status")
        checks.append(Check("status", status == "stopped", f"status {status!r}" + (
            "" if status == "stopped" else ", not 'stopped'")))
        changed = sorted(k for k in set(resource) | set(before or {})
                         if (before or {}).get(k) != resource.get(k) and k not in STOP_MAY_CHANGE)
        old = before or {}
        # meta may lose the server's tags (a PUT without the meta it read), never gain a security
        # label; notes may be added to, never dropped or rewritten
        sec = [(m.get("security") if isinstance(m, dict) else None) for m in (old.get("meta"), resource.get("meta"))]
        if sec[0] != sec[1]:
            changed.append(f"meta.security ({sec[0]!r} -> {sec[1]!r})")
        old_notes = old.get("note") if isinstance(old.get("note"), list) else []
        new_notes = resource.get("note") if isinstance(resource.get("note"), list) else []
        lost = [n for n in old_notes if n not in new_notes]
        if lost:
            changed.append(f"note ({len(lost)} of the record's notes dropped or rewritten)")
        checks.append(Check("only_status", not changed, f"elements changed beside the status: {changed}" if changed
                            else "nothing but the status (and a reason or an added note) changed"))
        checks.append(_text_check(resource, before))
        checks.append(unverified_check(resource, stop_schema(resource)))
    return checks


# ---------------------------------------------------------------- the score
def _key(ch: FhirChange) -> str:
    return f"{ch.resource_type}/{ch.id}"


def _change_text(ch: FhirChange) -> str:
    return f"{ch.kind} {_key(ch)}"


def _transient(activity: FhirActivity, log: list[Write]) -> list[str]:
    """Effects the log shows that the diff no longer does: created then deleted, deleted then
    re-created."""
    from pytest_groundeval.fhir.state import content

    in_diff = {_key(c): c.kind for c in activity.changes}
    out = []
    rewrites: dict[str, list[Write]] = {}
    for w in log:
        if not w.accepted:
            continue
        if w.opaque:
            out.append(f"a GraphQL mutation ({w.where}) changed the store in ways the request log does not name")
            continue
        if w.created and w.created not in in_diff:
            out.append(f"{w.created} was created ({w.where}) and is gone again")
        if w.method == "DELETE" and "/" not in w.target:
            out.append(f"a conditional delete ({w.where}) was accepted: the log does not name what it deleted")
        if w.method == "DELETE" and "/" in w.target and in_diff.get(w.target) != "deleted":
            out.append(f"{w.target} was deleted ({w.where})" + (" and written again" if w.target in in_diff else ""))
        if w.method in ("PUT", "PATCH") and "/" in w.target and not w.created and w.target not in in_diff:
            rewrites.setdefault(w.target, []).append(w)
    # an existing resource the diff shows unchanged, written more than once: changed and changed
    # back (one write is an unchanged rewrite; unknown stored versions are taken as different)
    for target, ws in rewrites.items():
        versions = [content(w.stored) if isinstance(w.stored, dict) else None for w in ws]
        if len(ws) > 1 and (None in versions or any(v != versions[-1] for v in versions)):
            out.append(f"{target} was changed and back ({'; '.join(w.where for w in ws[:3])})")
    return out


def unscored(truth: Any, why: str) -> Score:
    """Every applicable dimension failed for one reason (no activity, an unreadable one)."""
    due = bool(truth.get("due")) if isinstance(truth, dict) else True
    names = (DUE_DIMENSIONS if due else ("abstained",)) + ("no_collateral",)
    dims = {d: Dimension.from_checks(d, [Check("activity", False, why)]) for d in names}
    return Score(passed=False, metrics={**{d: 0.0 for d in names}, "pass": 0.0}, dimensions=dims,
                 details={}, reason=why)


def score_orders(activity: Any, truth: dict[str, Any]) -> Score:
    """Score one case from what its FHIR server saw (``FhirActivity``) against the truth."""
    if activity is None:
        return unscored(truth, "no FHIR activity was recorded for this case (no server state to score)")
    activity = as_activity(activity)
    log = writes(activity)
    exp = truth.get("expected")
    dims: dict[str, Dimension] = {}
    details: dict[str, Any] = {"changes": [_change_text(c) for c in activity.changes],
                               "writes": [w.describe() for w in log]}
    target: FhirChange | None = None
    if truth["due"]:
        rtype = exp["resource_type"]
        if "id" in exp:  # change an existing resource
            target = next((c for c in activity.changes if _key(c) == exp["id"]), None)
            if target is None:
                persisted = Check("persisted", False, f"{exp['id']} is unchanged")
            elif target.kind != "updated":
                persisted = Check("persisted", False, f"{exp['id']} was {target.kind}, not updated")
                target = None
            else:
                persisted = Check("persisted", True, f"{exp['id']} was updated")
        else:
            candidates = [c for c in activity.changes if c.kind == "created" and c.resource_type == rtype]
            if candidates:
                def rank(c: FhirChange) -> tuple[int, str]:
                    return (-sum(ch.passed for ch in correct_checks(c.after or {}, truth, None, activity.base_url)), c.id)

                target = min(candidates, key=rank)
                persisted = Check("persisted", True, f"{_key(target)} was created"
                                  + (f" (of {len(candidates)} {rtype}s created)" if len(candidates) > 1 else ""))
            else:
                refused = [w.describe() for w in log if not w.accepted]
                persisted = Check("persisted", False, f"no {rtype} was created" + (
                    f"; refused: {'; '.join(refused[:3])}" if refused else ""))
        dims["persisted"] = Dimension.from_checks("persisted", [persisted])
        resource = target.after if target is not None else None
        dims["valid"] = valid_dimension(resource, rtype)
        dims["correct"] = Dimension.from_checks("correct", correct_checks(resource, truth, target.before, activity.base_url) if resource
                                                is not None else [Check("resource", False, f"no {rtype} persisted")])
        if target is not None:
            details["judged"] = _key(target)
    else:
        attempted = [w.describe() for w in log if w.is_write]
        checks = [Check("no_write", not attempted, "no write request" if not attempted else
                        f"{len(attempted)} write request(s) where none was due: {'; '.join(attempted[:3])}"),
                  Check("state_unchanged", not activity.changes, "the server's state is unchanged"
                        if not activity.changes else f"changed: {', '.join(_change_text(c) for c in activity.changes[:5])}")]
        if activity.requests_cut:
            checks.append(Check("log_complete", False, f"{activity.requests_cut} request(s) beyond the log's bound: "
                                                       "no write cannot be shown"))
        dims["abstained"] = Dimension.from_checks("abstained", checks)
    others = [c for c in activity.changes if target is None or _key(c) != _key(target)]
    transient = _transient(activity, log)
    coll = [Check("other_changes", not others, "nothing else created, changed or deleted" if not others else
                  "; ".join(_change_text(c) for c in others[:5]) + (f" (and {len(others) - 5} more)" if len(others) > 5
                                                                   else "")),
            Check("transient", not transient, "; ".join(transient[:5]) if transient else
                  "no write undone within the case")]
    if activity.requests_cut:
        coll.append(Check("log_complete", False, f"{activity.requests_cut} request(s) beyond the log's bound: "
                                                 "what they wrote and undid cannot be shown"))
    dims["no_collateral"] = Dimension.from_checks("no_collateral", coll)
    order = [d for d in DIMENSIONS if d in dims]
    passed = all(dims[d].passed for d in order)
    failing = [f"{d}: {dims[d].reason}" for d in order if not dims[d].passed]
    return Score(passed=passed, metrics={**{d: 1.0 if dims[d].passed else 0.0 for d in order},
                                         "pass": 1.0 if passed else 0.0},
                 dimensions={d: dims[d] for d in order}, details=details,
                 reason=" | ".join(failing) if failing else (
                     f"done as required ({truth.get('why')})" if truth["due"] else f"nothing was due ({truth.get('why')})"))


def summarize(results: list[CaseResult]) -> dict[str, Any]:
    """Rates over the applicable cases (``<name>_n`` of them) for the dimensions that apply to
    some cases only; ``no_collateral`` and ``pass`` over every case (an error counts 0)."""
    run, summary = counts(results)
    for spec in SPECS:
        if spec.among == "applicable":
            values = [v for r in run if (v := r.applicable_value(spec.name)) is not None]  # errored: 0
            summary[f"{spec.name}_n"] = len(values)
        else:
            values = [r.metric(spec.name) for r in run]
        summary[spec.name] = round(mean(values), 6)
        summary[f"{spec.name}_ci95"] = rate_ci(values)
    return summary


__all__ = ["DIMENSIONS", "SPECS", "Write", "as_activity", "code_check", "day_of", "parse_instant", "score_orders", "summarize",
           "unscored",
           "valid_dimension", "writes"]
