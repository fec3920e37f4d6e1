"""FHIR, with no eval in it: the code systems and statuses (``codes``, the one copy), a bundle's
medications (``medications``) and the eval-free HealthChain tools (``hc_tools``)."""
