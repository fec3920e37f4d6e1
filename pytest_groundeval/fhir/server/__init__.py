"""groundeval's FHIR R4 server (eval-free): ``server.js`` (a Node wrapper around Medplum's FHIR
router, one in-memory repository per case; its ``package.json`` and ``package-lock.json`` pin
the npm dependencies) and its Python handle, :mod:`.manager`."""
