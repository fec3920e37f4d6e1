"""An in-process stand-in for one case's FHIR repository, for the orders tests that do not
need the real server: it holds a state (``{"Type/id": resource}``) seeded from a case's
bundle, answers the FHIR tools' calls (search by patient / code / status, read, create with
optional conditional create, update, delete, transaction) the way a FHIR server answers, logs
every request as the harness logs the real one (``FhirExchange``: method, path relative to the
base, status, request, response), and builds the case's ``FhirActivity`` (the log and
``fhir.state.diff_states`` of before and after). The real server's tests (helper
``fhirserver``) and the end-to-end run check the same scorer against the real thing."""

from __future__ import annotations

import copy
import itertools
from typing import Any
from urllib.parse import urlencode

from pytest_groundeval.fhir.state import diff_states, state_of
from pytest_groundeval.model import FhirActivity, FhirExchange
from pytest_groundeval.tasks.orders import codes_of, ref_of, resources

BASE = "http://127.0.0.1:9/case/test/fhir/R4"


def outcome(status: int, why: str) -> dict[str, Any]:
    return {"resourceType": "OperationOutcome", "issue": [{"severity": "error", "code": "processing",
                                                           "diagnostics": why}], "_status": status}


class FakeFhir:
    def __init__(self, bundle: dict[str, Any]) -> None:
        self.state = state_of(copy.deepcopy(resources(bundle)))
        self.before = copy.deepcopy(self.state)
        self.log: list[FhirExchange] = []
        self._ids = itertools.count(1)
        self.refuse: set[str] = set()  # resource types whose writes the "server" refuses (400)

    # -- the log --
    def _record(self, method: str, path: str, status: int, request: Any, response: Any) -> Any:
        self.log.append(FhirExchange(seq=len(self.log) + 1, method=method, path=path, status=status,
                                     request=copy.deepcopy(request), response=copy.deepcopy(response)))
        return response

    def activity(self, requests_cut: int = 0) -> FhirActivity:
        return FhirActivity(base_url=BASE, requests=list(self.log), changes=diff_states(self.before, self.state),
                            requests_cut=requests_cut)

    # -- operations (status, body) --
    def _matches(self, r: dict[str, Any], params: dict[str, str]) -> bool:
        for k, v in params.items():
            if k.startswith("_"):
                continue
            if k in ("patient", "subject"):
                if ref_of(r.get("subject")) != v:
                    return False
            elif k == "code":
                system, _, code = v.rpartition("|")
                concept = r.get("code") or r.get("medicationCodeableConcept")
                if code not in codes_of(concept, system or None):
                    return False
            elif k == "status":
                if r.get("status") not in v.split(","):
                    return False
            elif k == "_id":
                if r.get("id") != v:
                    return False
        return True

    def _search(self, rtype: str, params: dict[str, str]) -> tuple[int, Any]:
        found = [r for key, r in sorted(self.state.items()) if key.startswith(rtype + "/") and self._matches(r, params)]
        return 200, {"resourceType": "Bundle", "type": "searchset", "total": len(found),
                     "entry": [{"resource": copy.deepcopy(r)} for r in found]}

    def _create(self, resource: dict[str, Any], if_none_exist: str | None = None) -> tuple[int, Any]:
        rtype = resource.get("resourceType")
        if rtype in self.refuse or not isinstance(rtype, str):
            return 400, outcome(400, f"{rtype}: refused")
        if if_none_exist:
            params = dict(p.split("=", 1) for p in if_none_exist.split("&"))
            _, hits = self._search(rtype, params)
            if hits["entry"]:
                return 200, hits["entry"][0]["resource"]
        meta = resource.get("meta") if isinstance(resource.get("meta"), dict) else {}
        made = {**copy.deepcopy(resource), "id": f"new-{next(self._ids)}", "meta": {**meta, "versionId": "1"}}
        self.state[f"{rtype}/{made['id']}"] = made
        return 201, copy.deepcopy(made)

    def _update(self, resource: dict[str, Any]) -> tuple[int, Any]:
        rtype, rid = resource.get("resourceType"), resource.get("id")
        if rtype in self.refuse or not rid:
            return 400, outcome(400, "refused")
        key = f"{rtype}/{rid}"
        existed = key in self.state
        meta = resource.get("meta") if isinstance(resource.get("meta"), dict) else {}
        self.state[key] = {**copy.deepcopy(resource), "meta": {**meta, "versionId": "2" if existed else "1"}}
        return (200 if existed else 201), copy.deepcopy(self.state[key])

    def _delete(self, rtype: str, rid: str) -> tuple[int, Any]:
        self.state.pop(f"{rtype}/{rid}", None)
        return 200, outcome(200, "deleted")

    # -- the tools an agent gets (named as fhir.client's) --
    def fhir_search(self, resource_type: str, params: dict[str, str] | None = None) -> Any:
        params = dict(params or {})
        status, body = self._search(resource_type, params)
        return self._record("GET", f"{resource_type}?{urlencode(params)}", status, None, body)

    def fhir_read(self, resource_type: str, id: str) -> Any:  # noqa: A002 - the tool's argument name
        r = self.state.get(f"{resource_type}/{id}")
        status, body = (200, copy.deepcopy(r)) if r is not None else (404, outcome(404, "not found"))
        return self._record("GET", f"{resource_type}/{id}", status, None, body)

    def fhir_create(self, resource: dict[str, Any], if_none_exist: str | None = None) -> Any:
        status, body = self._create(resource, if_none_exist)
        return self._record("POST", str(resource.get("resourceType")), status, resource, body)

    def fhir_update(self, resource: dict[str, Any]) -> Any:
        status, body = self._update(resource)
        return self._record("PUT", f"{resource.get('resourceType')}/{resource.get('id')}", status, resource, body)

    def fhir_delete(self, resource_type: str, id: str) -> Any:  # noqa: A002
        status, body = self._delete(resource_type, id)
        return self._record("DELETE", f"{resource_type}/{id}", status, None, body)

    def fhir_transaction(self, bundle: dict[str, Any]) -> Any:
        answers = []
        saved = copy.deepcopy(self.state)
        for entry in bundle.get("entry") or []:
            req = entry.get("request") or {}
            method, url = req.get("method"), req.get("url", "")
            if method == "POST":
                status, body = self._create(entry["resource"], req.get("ifNoneExist"))
            elif method == "PUT":
                status, body = self._update({**entry["resource"], "id": url.split("/")[1]})
            elif method == "DELETE":
                status, body = self._delete(*url.split("/")[:2])
            else:
                status, body = self._search(url.split("?")[0], {})
            if status >= 400:  # a transaction is all or nothing
                self.state = saved
                return self._record("POST", "", status, bundle, body)
            loc = f"{body.get('resourceType')}/{body.get('id')}/_history/1" if status == 201 else None
            answers.append({"resource": body, "response": {"status": f"{status} {'Created' if status == 201 else 'OK'}",
                                                           **({"location": loc} if loc else {})}})
        return self._record("POST", "", 200, bundle, {"resourceType": "Bundle", "type": "transaction-response",
                                                      "entry": answers})

    def tools(self) -> list[Any]:
        """The five tools as plain callables (named as the agent's)."""
        return [self.fhir_search, self.fhir_read, self.fhir_create, self.fhir_update, self.fhir_transaction]
