"""Write the bundled suites' validation verdicts shipped with the package
(``pytest_groundeval/fhir/shipped_verdicts.json``, see ``pytest_groundeval/fhir/shipped.py``).

Every bundle the bundled suites validate (``fixtures/synthea/*.json``) is validated afresh
with ``fhir/bundles.py``'s own check, under the packages installed here; the file records
their versions, so an install with other versions validates again instead of trusting it.
Run it whenever the fixtures or the validating packages change (``scripts/make_fixtures.py``
runs it after writing ``fixtures/synthea``); ``--check`` exits 1 if the committed file is not
what this environment computes (a release or CI step before building the wheel).

Usage: uv run python scripts/make_shipped_verdicts.py [--check] [--fixtures fixtures/synthea]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_groundeval.fhir import shipped  # noqa: E402
from pytest_groundeval.fhir.bundles import issues_of, verdict_versions  # noqa: E402
from pytest_groundeval.tasks.datasets import bundle_files, read_bytes  # noqa: E402

SYNTHEA = ROOT / "fixtures" / "synthea"


def files(folder: Path = SYNTHEA) -> list[tuple[str, bytes]]:
    """``(name relative to fixtures/, bytes as the suites read them)`` of every bundle."""
    return [(path.relative_to(folder.parent).as_posix(), read_bytes(path)) for path in bundle_files(folder)]


def document(found: list[tuple[str, bytes]]) -> dict:
    """The shipped document for ``found``: every bundle validated afresh, under the versions here."""
    return shipped.make(found, issues_of, verdict_versions())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fixtures", type=Path, default=SYNTHEA, help="the bundles' folder (default fixtures/synthea)")
    p.add_argument("--out", type=Path, default=shipped.PATH, help="the shipped file (default: the package's)")
    p.add_argument("--check", action="store_true", help="exit 1 if --out is not what this environment computes")
    a = p.parse_args(argv)
    found = files(a.fixtures)
    if not found:
        print(f"no bundle in {a.fixtures}", file=sys.stderr)
        return 2
    text = shipped.dumps(document(found))
    if a.check:
        current = a.out.read_text(encoding="utf-8") if a.out.is_file() else None
        if current != text:
            print(f"{a.out} is stale: run scripts/make_shipped_verdicts.py", file=sys.stderr)
            return 1
        print(f"{a.out}: up to date ({len(found)} bundles)")
        return 0
    tmp = a.out.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(a.out)
    doc = shipped.load(a.out, verdict_versions())
    invalid = sum(1 for v in doc.values() if v is not None)
    print(f"wrote {a.out}: {len(found)} bundles, {len(doc)} verdicts ({invalid} invalid)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
