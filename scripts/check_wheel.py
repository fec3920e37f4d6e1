"""Check a built wheel holds what groundeval needs at run time (the release workflow runs it
before publishing): every file of the repository's ``fixtures/`` (as ``pytest_groundeval/data/``)
and ``evals/`` (as ``pytest_groundeval/suites/``), the package's own data files (the record's
JSON Schema, prices, the FHIR server's files: every non-Python file under ``pytest_groundeval/``
that git tracks), and the pytest plugin's and the CLI's entry points.

    python scripts/check_wheel.py dist/groundeval-*.whl

Exit 0: complete; 1: the missing members, one a line.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAPPED = {"fixtures/": "pytest_groundeval/data/", "evals/": "pytest_groundeval/suites/"}
ENTRY_POINTS = ("[pytest11]\ngroundeval = pytest_groundeval.pytest.plugin",
                "[console_scripts]\ngroundeval = pytest_groundeval.cli:main")


def expected_members(root: Path = ROOT) -> set[str]:
    """The wheel paths of the files git tracks that must ship."""
    tracked = subprocess.run(["git", "ls-files", "fixtures", "evals", "pytest_groundeval"], cwd=root,
                             capture_output=True, text=True, check=True).stdout.split()
    out = set()
    for path in tracked:
        if not (root / path).is_file():
            continue  # (deleted in the working tree)
        for source, target in MAPPED.items():
            if path.startswith(source):
                out.add(target + path[len(source):])
                break
        else:
            out.add(path)
    return out


def missing(wheel: Path, root: Path = ROOT) -> list[str]:
    """What the wheel lacks (empty: nothing)."""
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry = next((n for n in names if n.endswith(".dist-info/entry_points.txt")), None)
        entry_text = z.read(entry).decode() if entry else ""
    lacking = sorted(expected_members(root) - names)
    lacking += [f"entry point {e.splitlines()[1]!r} in {e.splitlines()[0]}" for e in ENTRY_POINTS
                if e.splitlines()[1] not in entry_text]
    return lacking


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    status = 0
    for wheel in map(Path, argv):
        lacking = missing(wheel)
        for name in lacking:
            print(f"{wheel.name}: missing {name}")
        if lacking:
            status = 1
        else:
            print(f"{wheel.name}: complete ({len(expected_members())} files of the repository, the entry points)")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
