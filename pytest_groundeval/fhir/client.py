"""A FHIR R4 REST client bound to one base URL, whose calls return values and never raise
(eval-free: standard library only), and the FHIR tools an agent gets.

* :class:`FhirClient`: ``search(resource_type, params)``, ``read(resource_type, id)``,
  ``create(resource)``, ``update(resource)``, ``transaction(bundle)``. Each returns the
  server's JSON (a resource, a Bundle) or, on any failure, an error value
  ``{"error": "...", "status": N, "outcome": {OperationOutcome}}`` (the server's own
  OperationOutcome when it sent one).
* :func:`fhir_tools`: the same five as LangChain tools (``fhir_search``, ``fhir_read``,
  ``fhir_create``, ``fhir_update``, ``fhir_transaction``) for a task's ``agent_tools(inputs)``:
  ``fhir_tools(inputs["fhir_base_url"])``. LangChain is imported when they are built.

The harness's FHIR server logs every request a case makes: that log, not the tools' own
account, is what the record and the scorers read.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Mapping

FHIR_JSON = "application/fhir+json"
TIMEOUT_S = 60.0
RESOURCE_TYPE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def _error(message: str, status: int | None = None, outcome: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"error": message}
    if status is not None:
        out["status"] = status
    if outcome is not None:
        out["outcome"] = outcome
    return out


def _outcome_text(outcome: Any) -> str | None:
    if not isinstance(outcome, Mapping) or outcome.get("resourceType") != "OperationOutcome":
        return None
    texts = []
    for issue in outcome.get("issue") or []:
        if isinstance(issue, Mapping):
            text = (issue.get("details") or {}).get("text") if isinstance(issue.get("details"), Mapping) else None
            texts.append(str(text or issue.get("diagnostics") or issue.get("code") or "error"))
    return "; ".join(texts) or None


def _bad_type(resource_type: Any) -> dict[str, Any] | None:
    if not isinstance(resource_type, str) or not resource_type or not set(resource_type) <= RESOURCE_TYPE_CHARS \
            or not resource_type[0].isupper():
        return _error(f"resource_type must be a FHIR resource type name such as 'Observation', not {resource_type!r}")
    return None


def _bad_id(rid: Any) -> dict[str, Any] | None:
    if not isinstance(rid, str) or not rid or any(c in rid for c in "/?#% ") or len(rid) > 64:
        return _error(f"id must be a FHIR id (letters, digits, '-', '.'; at most 64), not {rid!r}")
    return None


def _resource(value: Any, what: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as e:
            return None, _error(f"{what} is not JSON: {e}")
    if not isinstance(value, dict) or not isinstance(value.get("resourceType"), str):
        return None, _error(f"{what} must be a FHIR resource (a JSON object with resourceType)")
    return value, None


class FhirClient:
    """FHIR R4 over HTTP, bound to one base URL (a case's repository on the harness's server)."""

    def __init__(self, base_url: str, timeout: float = TIMEOUT_S) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(f"{self.base_url}/{path}", data=data, method=method,
                                     headers={"accept": FHIR_JSON, "content-type": FHIR_JSON, **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 - the case's own server
                raw = resp.read()
        except urllib.error.HTTPError as e:
            try:
                outcome = json.loads(e.read() or b"null")
            except (ValueError, OSError):
                outcome = None
            text = _outcome_text(outcome)
            return _error(f"HTTP {e.code}" + (f": {text}" if text else f" {e.reason}"), e.code, outcome)
        except (urllib.error.URLError, OSError, ValueError) as e:
            return _error(f"the FHIR server did not answer: {getattr(e, 'reason', e)}")
        try:
            return json.loads(raw) if raw else {}
        except ValueError as e:
            return _error(f"the FHIR server answered with something that is not JSON: {e}")

    def search(self, resource_type: str, params: Mapping[str, Any] | None = None) -> Any:
        """``GET [base]/<resource_type>?<params>``: a searchset Bundle. A list value repeats the
        parameter (``{"date": ["ge2020", "lt2021"]}``)."""
        bad = _bad_type(resource_type)
        if bad:
            return bad
        if params is not None and not isinstance(params, Mapping):
            return _error("params must be an object of search parameters, e.g. {\"patient\": \"Patient/123\"}")
        pairs: list[tuple[str, str]] = []
        for key, value in (params or {}).items():
            for v in value if isinstance(value, (list, tuple)) else [value]:
                pairs.append((str(key), str(v)))
        query = urllib.parse.urlencode(pairs, safe="/:|,")
        return self._call("GET", resource_type + (f"?{query}" if query else ""))

    def read(self, resource_type: str, id: str) -> Any:  # noqa: A002 - FHIR's name
        """``GET [base]/<resource_type>/<id>``."""
        return _bad_type(resource_type) or _bad_id(id) or self._call("GET", f"{resource_type}/{id}")

    def create(self, resource: Any, if_none_exist: str | None = None) -> Any:
        """``POST [base]/<resourceType>``; with ``if_none_exist`` (a search query such as
        ``identifier=x|y``) a conditional create: nothing new when one matches."""
        value, bad = _resource(resource, "resource")
        if bad:
            return bad
        bad = _bad_type(value["resourceType"])  # type: ignore[index]
        if bad:
            return bad
        headers = {"if-none-exist": if_none_exist} if if_none_exist else None
        return self._call("POST", value["resourceType"], value, headers)  # type: ignore[index]

    def update(self, resource: Any) -> Any:
        """``PUT [base]/<resourceType>/<id>`` (the resource's own id)."""
        value, bad = _resource(resource, "resource")
        if bad:
            return bad
        bad = _bad_type(value["resourceType"]) or _bad_id(value.get("id"))  # type: ignore[union-attr,index]
        if bad:
            return bad
        return self._call("PUT", f"{value['resourceType']}/{value['id']}", value)  # type: ignore[index]

    def transaction(self, bundle: Any) -> Any:
        """``POST [base]`` with a Bundle of type transaction (or batch)."""
        value, bad = _resource(bundle, "bundle")
        if bad:
            return bad
        if value.get("resourceType") != "Bundle" or value.get("type") not in ("transaction", "batch"):  # type: ignore[union-attr]
            return _error("bundle must be a Bundle of type 'transaction' (or 'batch')")
        return self._call("POST", "", value)


def fhir_tools(base_url: str) -> list[Any]:
    """The FHIR tools of one case as LangChain tools: ``fhir_search``, ``fhir_read``,
    ``fhir_create``, ``fhir_update``, ``fhir_transaction`` (errors as values)."""
    from pytest_groundeval.fhir.hc_tools.adapters import langchain_fhir_tools

    return langchain_fhir_tools(FhirClient(base_url))


__all__ = ["FhirClient", "fhir_tools"]
