"""The tools as an agent gets them (eval-free): LangChain ``StructuredTool`` s over the
catalog / build / validate functions, and HealthChain ``FHIRToolkit`` readers over ONE
patient's bundle (``list_medication_requests``, ``read_resource``). ``langchain_core`` and
HealthChain are imported only inside the functions that use them.
"""

from __future__ import annotations

import functools
import inspect
import json
import threading
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple, Union

from pytest_groundeval.fhir.codes import MEDICATION_REQUEST_STATUSES
from pytest_groundeval.fhir.codes import RXNORM as RXNORM_SYSTEM
from pytest_groundeval.fhir.hc_tools.build import build_medication_statement
from pytest_groundeval.fhir.hc_tools.catalog import CatalogArg, _resolve_catalog, lookup_medication_code
from pytest_groundeval.fhir.hc_tools.validate import validate_medication_statement

if TYPE_CHECKING:
    from healthchain.tools import FHIRToolkit

def langchain_tools(catalog: CatalogArg = None) -> list:
    """The three tools as LangChain StructuredTools (langchain_core imported lazily).

    ``catalog`` (a :class:`Catalog`, a path, or any other HealthChain
    ``TerminologyLookup``) fixes the catalog these tools use; by default they
    use the module-level catalog.
    """
    from langchain_core.tools import StructuredTool

    bound = None if catalog is None else _resolve_catalog(catalog)

    def with_catalog(fn: Any) -> Any:
        """``fn`` with the catalog fixed; its schema (signature, annotations) without it."""

        @functools.wraps(fn)
        def tool(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, catalog=bound, **kwargs)

        sig = inspect.signature(fn)
        tool.__signature__ = sig.replace(parameters=[p for n, p in sig.parameters.items() if n != "catalog"])
        tool.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k != "catalog"}
        tool.__doc__ = None  # the tool's description is set below; keep it out of the args schema
        return tool

    def validate(resource: Union[Dict[str, Any], str]) -> Dict[str, Any]:
        # the function accepts anything (and says what is wrong); the schema tells the model what to send
        return validate_medication_statement(resource)

    return [
        StructuredTool.from_function(
            func=func, name=fn.__name__,
            description=inspect.cleandoc(fn.__doc__ or ""),
            handle_validation_error=_bad_tool_arguments,  # a readable value, too
        )
        for func, fn in (
            (with_catalog(lookup_medication_code), lookup_medication_code),
            (with_catalog(build_medication_statement), build_medication_statement),
            (validate, validate_medication_statement),
        )
    ]


# --------------------------------------------------------------------------
# Reading one patient's bundle
# --------------------------------------------------------------------------

def fhir_toolkit(bundle: Any = None, catalog: CatalogArg = None) -> "FHIRToolkit":
    """HealthChain's ``FHIRToolkit`` over one bundle, with the site catalog as its lookup.

    ``bundle`` (a Bundle as a JSON string or dict, or an already loaded one) is
    loaded with ``load_bundle(..., version="R4B")`` before the toolkit gets it: the
    toolkit itself loads with the process-wide default FHIR version. ``catalog`` is
    as for :func:`lookup_medication_code` (default: the module-level catalog), so
    the toolkit's ``lookup_code`` / ``list_codes`` search the site catalog.
    Raises on an unreadable bundle (the tools below turn that into a value).
    """
    return _toolkit(bundle, _resolve_catalog(catalog))


def _toolkit(bundle: Any, lookup: Any) -> "FHIRToolkit":
    from healthchain.fhir import load_bundle
    from healthchain.tools import FHIRToolkit

    if isinstance(bundle, str):
        bundle = json.loads(bundle)
    if isinstance(bundle, dict):
        bundle = load_bundle(bundle, version="R4B")
    return FHIRToolkit(bundle=bundle, lookup=lookup)


def _bundle_reader(bundle: Any) -> Tuple[Any, frozenset]:
    """FHIRToolkit's ``get_coded_entries`` tool over ``bundle``, looked up once
    (``FHIRToolkit.run_tool`` rebuilds every tool's schema on each call), and the ids of the
    bundle's do-not-perform requests (:func:`_do_not_perform`). Only this tool of the kit is
    used, so its lookup stays HealthChain's default."""
    kit = _toolkit(bundle, None)
    return next(t for t in kit.get_tools() if t.name == "get_coded_entries"), _do_not_perform(kit.bundle)


def _do_not_perform(bundle: Any) -> frozenset:
    """Ids of the MedicationRequests with ``doNotPerform: true`` (a modifier element: the
    request says NOT to take the medication). HealthChain's ``CodedEntry`` does not carry it."""
    return frozenset(
        e.resource.id for e in (getattr(bundle, "entry", None) or [])
        if getattr(e.resource, "doNotPerform", None) is True and e.resource.get_resource_type() == "MedicationRequest"
    )


def _unreadable(exc: Exception) -> Dict[str, str]:
    return {"error": f"bundle cannot be read: {type(exc).__name__}: {exc}"}


def _bad_status(status: Any) -> Optional[Dict[str, str]]:
    if status is not None and (not isinstance(status, str) or status.strip().lower() not in MEDICATION_REQUEST_STATUSES):
        return {"error": f"status must be one of {', '.join(MEDICATION_REQUEST_STATUSES)} (or omitted for all), got {status!r}"}
    return None


def _medication_request_summary(get_coded_entries: Any, status: Optional[str], refused: frozenset = frozenset()) -> Dict[str, Any]:
    """The compact view of :func:`list_medication_requests`, read through FHIRToolkit's
    ``get_coded_entries`` tool (``medicationReference`` resolved in the bundle); requests
    whose id is in ``refused`` (doNotPerform) are their own items, ``do_not_perform: true``."""
    entries = get_coded_entries.run(
        resource_type="MedicationRequest", status=None if status is None else status.strip().lower()
    )
    if isinstance(entries, dict):  # the toolkit's error value, {"ok": false, "error": ...}
        return {"error": f"bundle cannot be read: {entries.get('error')}"}
    grouped: Dict[Tuple[Any, Any], Dict[str, Any]] = {}
    for e in entries:
        codings = e.get("codings") or []
        coding = next((c for c in codings if c.get("system") == RXNORM_SYSTEM and c.get("code")), None)
        code = coding["code"] if coding else e.get("code")
        dnp = e.get("resource_id") in refused
        item = grouped.setdefault((code, e.get("status"), dnp), {
            "code": code,
            "display": (coding.get("display") if coding else None) or e.get("display"),
            "status": e.get("status"),
            "requests": 0,
            "last_authored_on": None,
            **({"do_not_perform": True} if dnp else {}),
        })
        item["requests"] += 1
        authored_on = e.get("authored_on")
        if authored_on and (item["last_authored_on"] is None or authored_on > item["last_authored_on"]):
            item["last_authored_on"] = authored_on
    out = list(grouped.values())
    return {"status": status, "count": len(out), "medication_requests": out}


def list_medication_requests(bundle: Any, status: Optional[str] = None) -> Dict[str, Any]:
    """List the patient's MedicationRequests, optionally only those with one status.

    ``status`` is a MedicationRequest status (active, stopped, completed, on-hold,
    cancelled, draft, entered-in-error, unknown); omit it for all. Read with
    HealthChain's ``FHIRToolkit`` (its ``get_coded_entries`` tool over the bundle
    loaded as R4B; ``medicationReference`` resolved in the bundle); each request is
    identified by its RxNorm coding, wherever it sits in the concept's codings.

    Compact: one item per (code, status) with how many requests it has and the
    latest authoredOn. Returns ``{"status": status, "count": n,
    "medication_requests": [{code, display, status, requests, last_authored_on}]}``
    in bundle order, or ``{"error": "..."}``.
    ``bundle`` is a Bundle as a JSON string or dict, or an already loaded one.
    """
    bad = _bad_status(status)
    if bad:
        return bad
    try:
        reader, refused = _bundle_reader(bundle)
    except Exception as exc:  # never raise into the agent loop
        return _unreadable(exc)
    return _medication_request_summary(reader, status, refused)


def langchain_bundle_tools(bundle: Any, catalog: CatalogArg = None) -> list:
    """Tools over ONE patient's bundle, as LangChain StructuredTools: the catalog lookup
    (as in :func:`langchain_tools`) and ``list_medication_requests`` bound to this bundle
    (loaded once, on first use, into a HealthChain ``FHIRToolkit``). Nothing else of any other
    patient is reachable: the toolkit's own ``load_bundle`` tool (which opens any file
    path it is given) is not exposed."""
    lookup = next(t for t in langchain_tools(catalog) if t.name == "lookup_medication_code")
    lock = threading.Lock()
    loaded: Dict[str, Any] = {}

    def list_medication_requests_tool(status: Optional[str] = None) -> Dict[str, Any]:
        with lock:
            if "reader" not in loaded:
                try:
                    loaded["reader"] = _bundle_reader(bundle)
                except Exception as exc:  # never raise into the agent loop
                    return _unreadable(exc)
        return _bad_status(status) or _medication_request_summary(loaded["reader"][0], status, loaded["reader"][1])

    return [lookup, _list_requests_tool(list_medication_requests_tool)]


def _bad_tool_arguments(exc: Exception) -> str:
    """What a tool-using model gets for arguments that do not fit the tool's schema."""
    return json.dumps({"error": f"invalid tool arguments: {exc}"})


_LIST_REQUESTS_DOC = """List this patient's MedicationRequests from their FHIR record.

status: only requests with this status (active, stopped, completed, on-hold,
cancelled, draft, entered-in-error, unknown); omit it for all.
Returns {{"status", "count", "medication_requests": [{{code, display, status,
requests, last_authored_on}}]}}, one item per code and status (code and display
are the RxNorm coding{note}; "do_not_perform": true marks requests that say
not to take it), or {{"error": "..."}}."""


def _list_requests_tool(func: Any, note: str = "") -> Any:
    """``list_medication_requests`` over one bundle (``func(status)``), as a StructuredTool."""
    from langchain_core.tools import StructuredTool

    return StructuredTool.from_function(func=func, name="list_medication_requests",
                                        description=_LIST_REQUESTS_DOC.format(note=note),
                                        handle_validation_error=_bad_tool_arguments)




def _compact_resource(resource: Dict[str, Any]) -> Dict[str, Any]:
    """A resource without its narrative (``text``) and ``meta``: what an agent reads."""
    return {k: v for k, v in resource.items() if k not in ("text", "meta")}


def _resolve(resolve_reference: Any, reference: Any) -> Dict[str, Any]:
    if not isinstance(reference, str) or not reference.strip():
        return {"error": f"reference must be a non-empty string such as 'Medication/<id>' or 'urn:uuid:<id>', got {reference!r}"}
    try:
        got = resolve_reference.run(reference=reference.strip())
    except Exception as exc:  # never raise into the agent loop
        return {"error": f"reference {reference!r} cannot be resolved: {type(exc).__name__}: {exc}"}
    if not isinstance(got, dict) or not got.get("ok") or not isinstance(got.get("resource"), dict):
        why = got.get("error") if isinstance(got, dict) else got
        return {"error": f"reference {reference!r} not found in this patient's record: {why}"}
    return {"reference": reference.strip(), "resource": _compact_resource(got["resource"])}


def read_resource(bundle: Any, reference: str) -> Dict[str, Any]:
    """Read one resource of the bundle by reference (``Medication/<id>``, ``urn:uuid:<id>``;
    e.g. a MedicationRequest's ``medicationReference``), resolved with HealthChain's
    ``FHIRToolkit`` ``resolve_reference`` tool. Returns ``{"reference", "resource"}`` (the
    resource without its narrative and ``meta``) or ``{"error": "..."}``; never raises."""
    try:
        kit = _toolkit(bundle, None)
        resolver = next(t for t in kit.get_tools() if t.name == "resolve_reference")
    except Exception as exc:  # never raise into the agent loop
        return _unreadable(exc)
    return _resolve(resolver, reference)


def langchain_record_tools(bundle: Any) -> list:
    """Read-only tools over ONE patient's bundle, as LangChain StructuredTools:
    ``list_medication_requests`` (as in :func:`langchain_bundle_tools`) and
    ``read_resource`` (:func:`read_resource`), both over one HealthChain ``FHIRToolkit``
    loaded on first use. No catalog, no file access, nothing of any other patient."""
    from langchain_core.tools import StructuredTool

    lock = threading.Lock()
    loaded: Dict[str, Any] = {}

    def tools() -> Union[Dict[str, Any], Dict[str, str]]:
        with lock:
            if "tools" not in loaded:
                try:
                    kit = _toolkit(bundle, None)
                    loaded["tools"] = {t.name: t for t in kit.get_tools()}
                    loaded["refused"] = _do_not_perform(kit.bundle)
                except Exception as exc:  # never raise into the agent loop
                    return {"error": _unreadable(exc)}
            return loaded["tools"]

    def list_medication_requests_tool(status: Optional[str] = None) -> Dict[str, Any]:
        kit = tools()
        if "error" in kit:
            return kit["error"]
        return _bad_status(status) or _medication_request_summary(kit["get_coded_entries"], status, loaded["refused"])

    def read_resource_tool(reference: str) -> Dict[str, Any]:
        kit = tools()
        if "error" in kit:
            return kit["error"]
        return _resolve(kit["resolve_reference"], reference)

    lister = _list_requests_tool(list_medication_requests_tool, "; a medicationReference is already resolved")
    reader = StructuredTool.from_function(
        func=read_resource_tool, name="read_resource",
        description=inspect.cleandoc(
            """Read one resource of this patient's FHIR record by reference, e.g. a
            medicationReference ('Medication/<id>' or 'urn:uuid:<id>') or 'Patient/<id>'.
            Returns {"reference", "resource"} (the resource JSON without narrative) or
            {"error": "..."}."""),
        handle_validation_error=_bad_tool_arguments,
    )
    return [lister, reader]



def langchain_fhir_tools(client: Any) -> list:
    """One case's FHIR REST tools over ``client`` (a ``pytest_groundeval.fhir.client.FhirClient``
    bound to that case's base URL) as LangChain StructuredTools: ``fhir_search``,
    ``fhir_read``, ``fhir_create``, ``fhir_update``, ``fhir_transaction``. Each returns the
    server's JSON or an error value ``{"error": ...}`` (never raises into the agent loop)."""
    from langchain_core.tools import StructuredTool

    def guarded(fn: Any) -> Any:
        @functools.wraps(fn)
        def tool(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - errors are values
                return {"error": f"{type(exc).__name__}: {exc}"}
        return tool

    def fhir_search(resource_type: str, params: Optional[Dict[str, Any]] = None) -> Any:
        return client.search(resource_type, params)

    def fhir_read(resource_type: str, id: str) -> Any:  # noqa: A002 - FHIR's name
        return client.read(resource_type, id)

    def fhir_create(resource: Union[Dict[str, Any], str], if_none_exist: Optional[str] = None) -> Any:
        return client.create(resource, if_none_exist)

    def fhir_update(resource: Union[Dict[str, Any], str]) -> Any:
        return client.update(resource)

    def fhir_transaction(bundle: Union[Dict[str, Any], str]) -> Any:
        return client.transaction(bundle)

    docs = {
        "fhir_search": """Search this case's FHIR R4 server: resource_type (e.g. 'Observation') and
            params, the search parameters as an object, e.g. {"patient": "Patient/<id>",
            "code": "http://loinc.org|4548-4", "_sort": "-date", "_count": 50} (a list value
            repeats a parameter). Returns a searchset Bundle or {"error": ...}.""",
        "fhir_read": """Read one resource of this case's FHIR R4 server by type and id, e.g.
            ('Patient', '<id>'). Returns the resource or {"error": ...}.""",
        "fhir_create": """Create a resource on this case's FHIR R4 server (POST). resource: the
            FHIR R4 resource JSON. if_none_exist (optional): a search query such as
            'identifier=http://x|1' for a conditional create (nothing new when one matches).
            Returns the stored resource (with its id) or {"error": ...}.""",
        "fhir_update": """Update (PUT) a resource on this case's FHIR R4 server: the whole resource
            JSON with its id. Returns the stored resource or {"error": ...}.""",
        "fhir_transaction": """Send a FHIR R4 Bundle of type 'transaction' (or 'batch') to this
            case's server. Returns the transaction-response Bundle or {"error": ...}.""",
    }
    return [StructuredTool.from_function(func=guarded(fn), name=fn.__name__,
                                         description=inspect.cleandoc(docs[fn.__name__]),
                                         handle_validation_error=_bad_tool_arguments)
            for fn in (fhir_search, fhir_read, fhir_create, fhir_update, fhir_transaction)]


__all__ = [
    "fhir_toolkit",
    "langchain_fhir_tools",
    "langchain_bundle_tools",
    "langchain_record_tools",
    "langchain_tools",
    "list_medication_requests",
    "read_resource",
]
