"""The data groundeval ships: the RxNorm catalog, the dose-ceiling table and the bundled
suites' cases (the repository's ``fixtures/``, mapped to ``pytest_groundeval/data`` when the
wheel is built; see ``pyproject.toml``). Read through :mod:`importlib.resources`, so every
default path resolves inside the installed package; in a source checkout (no ``data``
folder in the package) the repository's ``fixtures/`` is the same data. A data file that is
missing is a loud error naming it, never an empty catalog or an empty suite.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

PACKAGE = "pytest_groundeval"
DATA = "data"


class MissingDataError(FileNotFoundError):
    """A file groundeval ships is not where the installed package should hold it."""


def data_root() -> Path:
    """The folder holding the packaged data (``pytest_groundeval/data`` in a wheel, the
    repository's ``fixtures/`` in a source checkout)."""
    packaged = Path(str(resources.files(PACKAGE) / DATA))
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "fixtures").is_dir() and (checkout / "pyproject.toml").is_file():
        return checkout / "fixtures"
    raise MissingDataError(
        f"groundeval's packaged data folder {packaged} is missing: the installed package is "
        "incomplete (reinstall groundeval; a wheel built from the repository carries it)")


def data_path(*parts: str) -> Path:
    """A packaged data file or folder, e.g. ``data_path("terminology", "rxnorm.json")``."""
    path = data_root().joinpath(*parts)
    if not path.exists():
        raise MissingDataError(
            f"groundeval's packaged data file {path} is missing: the installed package is "
            "incomplete (reinstall groundeval; a wheel built from the repository carries it)")
    return path


__all__ = ["MissingDataError", "data_path", "data_root"]
