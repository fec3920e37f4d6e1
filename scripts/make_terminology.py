"""Derive the RxNorm medication catalog from Synthea FHIR bundles.

Reads every bundle under each ``--source`` directory (``*.json`` and
``*.json.gz``, file names may be non-ASCII), takes every RxNorm coding of
every MedicationRequest.medicationCodeableConcept and every Medication.code
(all statuses; the RxNorm coding wherever it sits in ``coding``), merges in
the ``--extra`` lists of ``{code, display, system}`` entries, and writes a
JSON list sorted by display then code.

    uv run python scripts/make_terminology.py \\
        --source ../shared/data/synthea-r4 \\
        --source ../shared/data/groundeval-seed/synthea \\
        --extra ../shared/data/groundeval-seed/terminology/rxnorm_medications.json \\
        --extra fixtures/terminology/rxnorm_extra.json \\
        --out fixtures/terminology/rxnorm.json

(those are also the defaults, resolved against the repository root).

Output is deterministic: the same inputs give byte-identical output. If the
same code appears with two displays the lexicographically smallest display
wins, unless an ``--extra`` entry names the code, whose display then wins;
conflicts are reported on stderr.

It also writes the RxNorm <-> NDC concept map of the same products (``--ndc-out``,
default ``fixtures/terminology/ndc_rxnorm.json``): every NDC coding that sits in the same
``medicationCodeableConcept`` / ``Medication.code`` as an RxNorm coding, as
``{"ndc", "rxnorm_code"}`` sorted by NDC. An NDC seen beside two RxNorm codes is ambiguous
and left out (reported on stderr). The map holds only what the data pair: on the current
Synthea and seed bundles that is nothing (they carry RxNorm only), so the committed map is
empty and the write scorer reads an NDC coding by the rule for codes it cannot map.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Set, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the package's one copy of the code systems and statuses

from pytest_groundeval.fhir.codes import NDC, RXNORM  # noqa: E402


def iter_bundle_files(source: Path) -> Iterator[Path]:
    files = [p for p in source.rglob("*") if p.is_file()]
    for path in sorted(files, key=lambda p: str(p)):
        name = path.name
        if name.endswith(".json") or name.endswith(".json.gz"):
            yield path


def load_json(path: Path) -> Any:
    if path.name.endswith(".gz"):
        with gzip.open(path, "rb") as fh:
            return json.loads(fh.read().decode("utf-8"))
    return json.loads(path.read_bytes().decode("utf-8"))


def iter_resources(bundle: Any) -> Iterator[Dict[str, Any]]:
    if not isinstance(bundle, dict):
        return
    if bundle.get("resourceType") != "Bundle":
        yield bundle
        return
    for entry in bundle.get("entry") or []:
        resource = entry.get("resource") if isinstance(entry, dict) else None
        if isinstance(resource, dict):
            yield from iter_resources(resource)


def medication_concept(resource: Dict[str, Any]) -> Dict[str, Any] | None:
    """A MedicationRequest's medicationCodeableConcept or a Medication's code."""
    rtype = resource.get("resourceType")
    concept = (resource.get("medicationCodeableConcept") if rtype == "MedicationRequest"
               else resource.get("code") if rtype == "Medication" else None)
    return concept if isinstance(concept, dict) else None


def codings_of(resource: Dict[str, Any], system: str) -> Iterator[Tuple[str, str]]:
    """(code, display) of every coding of ``system`` in the resource's medication concept."""
    concept = medication_concept(resource)
    for coding in (concept or {}).get("coding") or []:
        if not isinstance(coding, dict) or coding.get("system") != system:
            continue
        code, display = coding.get("code"), coding.get("display")
        if code:
            yield str(code).strip(), str(display or "").strip()


def rxnorm_codings(resource: Dict[str, Any]) -> Iterator[Tuple[str, str]]:
    for code, display in codings_of(resource, RXNORM):
        if display:
            yield code, display


def ndc_pairs(sources: Iterable[Path]) -> List[Dict[str, str]]:
    """The RxNorm <-> NDC map of the same products: NDC codings beside an RxNorm coding in one
    medication concept; an NDC paired with two RxNorm codes is left out as ambiguous."""
    seen: Dict[str, Set[str]] = {}
    for source in sources:
        for path in iter_bundle_files(source):
            for resource in iter_resources(load_json(path)):
                rx = {code for code, _ in codings_of(resource, RXNORM)}
                for ndc, _display in codings_of(resource, NDC):
                    seen.setdefault(ndc, set()).update(rx)
    out = []
    for ndc in sorted(seen):
        if len(seen[ndc]) != 1:
            print(f"note: NDC {ndc} left out: paired with {sorted(seen[ndc]) or 'no RxNorm code'}", file=sys.stderr)
            continue
        out.append({"ndc": ndc, "rxnorm_code": next(iter(seen[ndc]))})
    return out


def collect(sources: Iterable[Path], extras: Iterable[Path]) -> List[Dict[str, str]]:
    """Return the sorted catalog.

    A code seen with several displays in the bundles keeps the
    lexicographically smallest one; an ``--extra`` entry's display overrides
    the bundles' (extras are curated, e.g. the original 30-code catalog whose
    displays the seed write cases use). Two extras disagreeing is an error.
    """
    seen: Dict[str, Set[str]] = {}
    for source in sources:
        for path in iter_bundle_files(source):
            for resource in iter_resources(load_json(path)):
                for code, display in rxnorm_codings(resource):
                    seen.setdefault(code, set()).add(display)
    curated: Dict[str, str] = {}
    for extra in extras:
        for item in load_json(extra):
            if item.get("system", RXNORM) != RXNORM:
                raise SystemExit(f"{extra}: non-RxNorm entry {item!r}")
            code, display = str(item["code"]).strip(), str(item["display"]).strip()
            if curated.get(code, display) != display:
                raise SystemExit(f"{extra}: code {code} given as {display!r} and {curated[code]!r}")
            curated[code] = display
    catalog = []
    for code in sorted(set(seen) | set(curated)):
        displays = sorted(seen.get(code, ()))
        chosen = curated.get(code) or displays[0]
        others = [d for d in displays if d != chosen]
        if others:
            print(f"note: code {code}: using {chosen!r}, not {others}", file=sys.stderr)
        catalog.append({"code": code, "display": chosen, "system": RXNORM})
    catalog.sort(key=lambda e: (e["display"], e["code"]))
    return catalog


REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "data"
DEFAULT_SOURCES = [SHARED / "synthea-r4", SHARED / "groundeval-seed" / "synthea"]
DEFAULT_EXTRAS = [
    SHARED / "groundeval-seed" / "terminology" / "rxnorm_medications.json",
    REPO / "fixtures" / "terminology" / "rxnorm_extra.json",
]
DEFAULT_OUT = REPO / "fixtures" / "terminology" / "rxnorm.json"
DEFAULT_NDC_OUT = REPO / "fixtures" / "terminology" / "ndc_rxnorm.json"


def render(catalog: List[Dict[str, str]]) -> str:
    return json.dumps(catalog, indent=2, ensure_ascii=False) + "\n"


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", action="append", type=Path, default=None,
                        help="directory of Synthea bundles (*.json, *.json.gz); repeatable "
                        f"(default: {', '.join(str(p) for p in DEFAULT_SOURCES)})")
    parser.add_argument("--extra", action="append", type=Path, default=None,
                        help="JSON list of extra {code, display, system} RxNorm entries; repeatable "
                        f"(default: {', '.join(str(p) for p in DEFAULT_EXTRAS)})")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output JSON path (default: {DEFAULT_OUT})")
    parser.add_argument("--ndc-out", type=Path, default=DEFAULT_NDC_OUT,
                        help=f"RxNorm <-> NDC map output path (default: {DEFAULT_NDC_OUT})")
    args = parser.parse_args(argv)
    sources = args.source if args.source is not None else DEFAULT_SOURCES
    extras = args.extra if args.extra is not None else DEFAULT_EXTRAS
    for source in sources:
        if not source.is_dir():
            parser.error(f"--source {source} is not a directory")
    for extra in extras:
        if not extra.is_file():
            parser.error(f"--extra {extra} is not a file")
    catalog = collect(sources, extras)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(catalog), encoding="utf-8")
    print(f"wrote {len(catalog)} codes to {args.out}", file=sys.stderr)
    pairs = ndc_pairs(sources)
    args.ndc_out.parent.mkdir(parents=True, exist_ok=True)
    args.ndc_out.write_text(render(pairs), encoding="utf-8")
    print(f"wrote {len(pairs)} NDC <-> RxNorm pairs to {args.ndc_out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
