"""LangSmith: tracing and experiments."""
