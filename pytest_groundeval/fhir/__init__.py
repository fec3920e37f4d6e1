"""FHIR: medications in bundles and the eval-free HealthChain tools."""
