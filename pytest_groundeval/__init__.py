"""groundeval: an eval harness for healthcare AI agents, as a pytest plugin."""
