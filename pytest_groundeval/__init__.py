"""groundeval: an eval harness for healthcare AI agents, as a pytest plugin.

``pytest_groundeval.load_run(path)``: a stored run record, typed (``model.RunRecord``), with the
reviews beside it, ``to_rows()`` and ``to_dataframe()`` (``reporting/export.py``). Imported on
first use: importing the package (as pytest does for the plugin) loads nothing more.
"""

from typing import Any

__all__ = ["load_run"]


def __getattr__(name: str) -> Any:
    if name == "load_run":
        from pytest_groundeval.reporting.export import load_run

        return load_run
    raise AttributeError(f"module 'pytest_groundeval' has no attribute {name!r}")
