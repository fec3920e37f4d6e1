"""HealthChain FHIR operations wrapped as agent tools.

Eval-free on purpose: nothing here knows about cases, ground truth or scores,
and nothing imports from the rest of ``pytest_groundeval`` but ``fhir.codes`` (plain
constants) and, inside ``default_catalog_path``, the packaged-data locator, so the package
can be lifted into HealthChain's agent toolkit as it is.

Four modules: ``catalog`` (the RxNorm catalog and its lookup), ``build`` (building a
MedicationStatement), ``validate`` and ``adapters`` (the tools as an agent gets them:
LangChain tools, readers of one patient's bundle). This module re-exports their public
names, so ``hc_tools.X`` keeps working.

Three tools, each taking flat JSON-friendly arguments and returning a
JSON-serialisable dict. Errors come back as values (``{"error": "..."}`` or
``{"valid": False, "issues": [...]}``) the agent can read and act on; no tool
raises.

- :func:`lookup_medication_code` searches a site RxNorm catalog (a JSON list
  of ``{code, display, system}``) so the agent looks codes up instead of
  guessing them. :class:`Catalog` is a HealthChain ``TerminologyLookup``
  (``search``, ``entries()``), so it also serves ``FHIRToolkit(lookup=...)``;
  and any other ``TerminologyLookup`` can serve the tool (``catalog=``).
- :func:`build_medication_statement` builds an R4B MedicationStatement with
  ``healthchain.fhir.create_medication_statement`` / ``create_dosage``, adding
  what those helpers do not cover (UCUM system/code on quantities, dose
  ranges, frequency ranges, non-daily periods, notes). ``FHIRToolkit``'s
  ``build_resource`` covers less still (FRICTION.md D10).
- :func:`validate_medication_statement` runs
  ``healthchain.fhir.validate_resource`` against R4B plus the checks an agent
  needs spelled out (resourceType, the required ``status`` binding); it does
  not go through ``FHIRToolkit``'s ``validate_resource`` tool, which has no
  FHIR version and raises on non-dict input (FRICTION.md D11).

:func:`langchain_tools` returns the three as LangChain ``StructuredTool`` s;
``langchain_core`` is imported only there. :func:`list_medication_requests` and
:func:`langchain_bundle_tools` read one patient's bundle through
``FHIRToolkit``'s ``get_coded_entries`` tool; :func:`fhir_toolkit` is that
toolkit over a bundle with the site catalog as its lookup. :func:`langchain_fhir_tools`
are one case's FHIR REST tools over a ``pytest_groundeval.fhir.client.FhirClient`` (search,
read, create, update, transaction; errors as values). HealthChain itself is
imported only inside the functions that use it.
"""

from __future__ import annotations

from pytest_groundeval.fhir.codes import MEDICATION_REQUEST_STATUSES
from pytest_groundeval.fhir.codes import MEDICATION_STATEMENT_STATUSES as R4B_MEDICATION_STATEMENT_STATUSES
from pytest_groundeval.fhir.codes import RXNORM as RXNORM_SYSTEM
from pytest_groundeval.fhir.codes import UCUM as UCUM_SYSTEM
from pytest_groundeval.fhir.hc_tools.adapters import (
    fhir_toolkit,
    langchain_bundle_tools,
    langchain_fhir_tools,
    langchain_record_tools,
    langchain_tools,
    list_medication_requests,
    read_resource,
)
from pytest_groundeval.fhir.hc_tools.build import UCUM_DOSE_UNITS, build_medication_statement
from pytest_groundeval.fhir.hc_tools.catalog import (
    CATALOG_FILE,
    Catalog,
    CatalogArg,
    CatalogEntries,
    default_catalog_path,
    get_catalog,
    load_catalog,
    lookup_medication_code,
    set_catalog,
)
from pytest_groundeval.fhir.hc_tools.validate import validate_medication_statement

__all__ = [
    "CATALOG_FILE",
    "Catalog",
    "CatalogArg",
    "CatalogEntries",
    "MEDICATION_REQUEST_STATUSES",
    "R4B_MEDICATION_STATEMENT_STATUSES",
    "RXNORM_SYSTEM",
    "UCUM_DOSE_UNITS",
    "UCUM_SYSTEM",
    "build_medication_statement",
    "default_catalog_path",
    "fhir_toolkit",
    "get_catalog",
    "langchain_bundle_tools",
    "langchain_fhir_tools",
    "langchain_record_tools",
    "langchain_tools",
    "list_medication_requests",
    "load_catalog",
    "lookup_medication_code",
    "read_resource",
    "set_catalog",
    "validate_medication_statement",
]
