"""The bundled eval suites (installed as ``pytest_groundeval.suites``: run them with
``pytest --pyargs pytest_groundeval.suites``)."""
