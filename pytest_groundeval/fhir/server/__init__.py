"""groundeval's FHIR R4 server (eval-free): ``server.js`` (a Node wrapper around Medplum's FHIR
router, one in-memory repository per case), shipped as ``server.bundle.js`` with its npm
dependencies inside (:mod:`.bundle`; ``package.json`` and ``package-lock.json`` pin them,
``build.mjs`` bundles them), the Node that runs it (:mod:`.node`), and its Python handle,
:mod:`.manager`."""
