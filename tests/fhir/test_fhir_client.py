"""The agents' FHIR tools (``fhir/client.py``, ``hc_tools.langchain_fhir_tools``): errors come
back as values, never raised, whatever the arguments or the server."""

from __future__ import annotations

import socket

import pytest

from pytest_groundeval.fhir.client import FhirClient, fhir_tools


def dead_base() -> str:
    """A loopback base URL where nothing listens (a port bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/case/x/fhir/R4"


@pytest.mark.parametrize("call, says", [
    (lambda c: c.search("observation", {}), "resource_type must be a FHIR resource type"),
    (lambda c: c.search("Observation/1", {}), "resource_type must be a FHIR resource type"),
    (lambda c: c.search("Observation", ["patient"]), "params must be an object"),
    (lambda c: c.read("Patient", "../x"), "id must be a FHIR id"),
    (lambda c: c.create("{not json"), "resource is not JSON"),
    (lambda c: c.create({"status": "active"}), "must be a FHIR resource"),
    (lambda c: c.update({"resourceType": "Patient"}), "id must be a FHIR id"),
    (lambda c: c.transaction({"resourceType": "Bundle", "type": "collection"}), "type 'transaction'"),
    (lambda c: c.read("Patient", "p1"), "the FHIR server did not answer"),
])
def test_errors_are_values(call, says):
    got = call(FhirClient(dead_base()))
    assert isinstance(got, dict) and says in got["error"]


def test_the_langchain_tools_have_the_contracts_names_and_return_error_values():
    tools = fhir_tools(dead_base())
    assert [t.name for t in tools] == ["fhir_search", "fhir_read", "fhir_create", "fhir_update", "fhir_transaction"]
    by = {t.name: t for t in tools}
    assert "did not answer" in by["fhir_read"].invoke({"resource_type": "Patient", "id": "p1"})["error"]
    bad = by["fhir_search"].invoke({"resource_type": 3, "params": "nope"})  # arguments the schema refuses
    assert isinstance(bad, (str, dict)) and bad
