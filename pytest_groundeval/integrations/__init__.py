"""Integrations with outside services."""
