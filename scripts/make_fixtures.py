"""Trim full Synthea R4 patient bundles into small, deterministic groundeval fixtures.

Usage::

    uv run python scripts/make_fixtures.py --source DIR [--source DIR2 ...] \\
        --out fixtures/synthea [--select stratified|all] [--per-stratum N] [--seed S]

Each ``*.json`` / ``*.json.gz`` file in a source folder (any file name, visited in
sorted order) is read as a FHIR R4 Bundle and reduced to a ``collection`` Bundle
holding only Patient, MedicationRequest, Medication, Condition and
AllergyIntolerance entries (``fullUrl`` + ``resource``; the Patient's ``text``
narrative is dropped, everything else is kept unchanged). The output for
``<stem>.json[.gz]`` is ``<out>/<stem>.json``: UTF-8, ``ensure_ascii=False``,
indent=1, original key order, trailing newline, written atomically. Same input
-> byte-identical output.

``--select stratified`` (default) picks ``--per-stratum`` patients from each
stratum of distinct active RxNorm codes (``0``, ``1-3``, ``4-8``, ``>8``), ranked
by sha256(file name + seed), and makes sure the selection holds at least two
deceased patients and at least two patients with an RxNorm code that is both
stopped/completed and active, when the sources have them. ``--select all``
trims every readable bundle.

Stdlib + orjson only. Importable: ``main(argv)`` returns the process exit code.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence, TextIO

try:  # orjson is a project dependency; fall back to stdlib json if absent
    import orjson

    def _loads(data: bytes) -> Any:
        return orjson.loads(data)

except ImportError:  # pragma: no cover

    def _loads(data: bytes) -> Any:
        return json.loads(data.decode("utf-8"))


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the package's one copy of the code systems and statuses

from pytest_groundeval.fhir.codes import RXNORM as RXNORM_SYSTEM  # noqa: E402
from pytest_groundeval.fhir.codes import REQUEST_ACTIVE, REQUEST_ENDED  # noqa: E402

KEEP_TYPES = (
    "Patient",
    "MedicationRequest",
    "Medication",
    "Condition",
    "AllergyIntolerance",
)
STRATA = ("0", "1-3", "4-8", ">8")
(ACTIVE_STATUS,) = REQUEST_ACTIVE
ENDED_STATUSES = REQUEST_ENDED
MIN_DECEASED = 2
MIN_STOPPED_ACTIVE = 2


class BundleError(Exception):
    """A source file that cannot be used as a patient bundle."""


# --------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------


def output_stem(name: str) -> str | None:
    """File name without ``.json`` / ``.json.gz``; None if not a bundle file name."""
    lower = name.lower()
    if lower.endswith(".json.gz"):
        return name[: -len(".json.gz")]
    if lower.endswith(".json"):
        return name[: -len(".json")]
    return None


def iter_bundle_files(source: Path) -> list[Path]:
    """``.json`` / ``.json.gz`` files directly in ``source``, sorted by name."""
    return sorted(
        (p for p in source.iterdir() if p.is_file() and output_stem(p.name)),
        key=lambda p: p.name,
    )


def load_bundle(path: Path) -> dict:
    """Parse a bundle file; raise BundleError (with a reason) if unusable."""
    try:
        raw = path.read_bytes()
        if path.name.lower().endswith(".gz"):
            raw = gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise BundleError(f"cannot read/decompress: {exc}") from None
    try:
        data = _loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BundleError(f"not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("resourceType") != "Bundle":
        rt = data.get("resourceType") if isinstance(data, dict) else type(data).__name__
        raise BundleError(f"not a FHIR Bundle (resourceType={rt!r})")
    entries = data.get("entry")
    if not isinstance(entries, list):
        entries = []
    if not any(_resource_type(e) == "Patient" for e in entries):
        raise BundleError("bundle has no Patient")
    return data


def _resource(entry: Any) -> dict | None:
    if isinstance(entry, dict) and isinstance(entry.get("resource"), dict):
        return entry["resource"]
    return None


def _resource_type(entry: Any) -> str | None:
    res = _resource(entry)
    return res.get("resourceType") if res else None


# --------------------------------------------------------------------------
# trimming and writing
# --------------------------------------------------------------------------


def trim_bundle(bundle: dict) -> dict:
    """Collection bundle with only KEEP_TYPES entries (fullUrl + resource)."""
    entries = []
    for entry in bundle.get("entry") or []:
        res = _resource(entry)
        if res is None or res.get("resourceType") not in KEEP_TYPES:
            continue
        if res["resourceType"] == "Patient" and "text" in res:
            res = {k: v for k, v in res.items() if k != "text"}
        new_entry: dict[str, Any] = {}
        if "fullUrl" in entry:
            new_entry["fullUrl"] = entry["fullUrl"]
        new_entry["resource"] = res
        entries.append(new_entry)
    out: dict[str, Any] = {"resourceType": "Bundle"}
    if "id" in bundle:
        out["id"] = bundle["id"]
    out["type"] = "collection"
    out["entry"] = entries
    return out


def dump_json(obj: Any) -> bytes:
    """Deterministic serialisation: indent=1, non-ASCII kept, key order kept, newline."""
    return (json.dumps(obj, ensure_ascii=False, indent=1) + "\n").encode("utf-8")


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder + os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


# --------------------------------------------------------------------------
# medication codes
# --------------------------------------------------------------------------


def rxnorm_code(concept: Any) -> str | None:
    """Code of the first coding whose system is RxNorm (not simply coding[0])."""
    if not isinstance(concept, dict):
        return None
    for coding in concept.get("coding") or []:
        if (
            isinstance(coding, dict)
            and coding.get("system") == RXNORM_SYSTEM
            and coding.get("code")
        ):
            return str(coding["code"])
    return None


def medication_index(bundle: dict) -> dict[str, dict]:
    """Map ``fullUrl`` and ``Medication/<id>`` to Medication resources of a bundle."""
    index: dict[str, dict] = {}
    for entry in bundle.get("entry") or []:
        res = _resource(entry)
        if res is None or res.get("resourceType") != "Medication":
            continue
        full_url = entry.get("fullUrl")
        if isinstance(full_url, str) and full_url:
            index.setdefault(full_url, res)
        if res.get("id"):
            index.setdefault(f"Medication/{res['id']}", res)
    return index


def resolve_medication(mr: dict, reference: str, index: dict[str, dict]) -> dict | None:
    """Resolve a medicationReference: contained ``#id``, ``urn:uuid:`` fullUrl, ``Medication/<id>``."""
    if reference.startswith("#"):
        wanted = reference[1:]
        for res in mr.get("contained") or []:
            if (
                isinstance(res, dict)
                and res.get("resourceType") == "Medication"
                and res.get("id") == wanted
            ):
                return res
        return None
    if reference in index:
        return index[reference]
    # absolute URL form: http://server/fhir/Medication/<id>
    marker = "/Medication/"
    if marker in reference:
        med_id = reference.rsplit(marker, 1)[1].split("/")[0]
        return index.get(f"Medication/{med_id}")
    return None


def medication_request_code(mr: dict, index: dict[str, dict]) -> str | None:
    """RxNorm code of a MedicationRequest (codeable concept or referenced Medication)."""
    if "medicationCodeableConcept" in mr:
        return rxnorm_code(mr["medicationCodeableConcept"])
    ref = mr.get("medicationReference")
    if isinstance(ref, dict) and isinstance(ref.get("reference"), str):
        med = resolve_medication(mr, ref["reference"], index)
        if med is not None:
            return rxnorm_code(med.get("code"))
    return None


def codes_by_status(bundle: dict) -> dict[str, set[str]]:
    """MedicationRequest status -> set of RxNorm codes."""
    index = medication_index(bundle)
    out: dict[str, set[str]] = {}
    for entry in bundle.get("entry") or []:
        res = _resource(entry)
        if res is None or res.get("resourceType") != "MedicationRequest":
            continue
        code = medication_request_code(res, index)
        if code is not None:
            out.setdefault(str(res.get("status")), set()).add(code)
    return out


def active_codes(bundle: dict) -> set[str]:
    """Distinct RxNorm codes of MedicationRequests with status ``active``."""
    return codes_by_status(bundle).get(ACTIVE_STATUS, set())


def stopped_and_active_codes(bundle: dict) -> set[str]:
    """RxNorm codes present in both a stopped/completed and an active MedicationRequest."""
    by_status = codes_by_status(bundle)
    ended: set[str] = set()
    for status in ENDED_STATUSES:
        ended |= by_status.get(status, set())
    return ended & by_status.get(ACTIVE_STATUS, set())


def patient_of(bundle: dict) -> dict:
    for entry in bundle.get("entry") or []:
        if _resource_type(entry) == "Patient":
            return entry["resource"]
    raise BundleError("bundle has no Patient")


def is_deceased(patient: dict) -> bool:
    return bool(patient.get("deceasedDateTime")) or patient.get("deceasedBoolean") is True


def patient_name(patient: dict) -> str:
    for name in patient.get("name") or []:
        if not isinstance(name, dict):
            continue
        parts = [*(name.get("given") or []), name.get("family") or ""]
        text = " ".join(p for p in parts if p) or name.get("text") or ""
        if text:
            return text
    return str(patient.get("id", "?"))


def stratum_of(n_active: int) -> str:
    if n_active == 0:
        return "0"
    if n_active <= 3:
        return "1-3"
    if n_active <= 8:
        return "4-8"
    return ">8"


# --------------------------------------------------------------------------
# selection
# --------------------------------------------------------------------------


@dataclass
class PatientFile:
    source: Path
    stem: str
    trimmed: dict
    name: str
    active: set[str]
    deceased: bool
    stopped_active: set[str]
    rank: str = ""

    @property
    def out_name(self) -> str:
        return self.stem + ".json"

    @property
    def stratum(self) -> str:
        return stratum_of(len(self.active))

    @property
    def has_stopped_active(self) -> bool:
        return bool(self.stopped_active)


def analyse(path: Path, stem: str, seed: str) -> PatientFile:
    bundle = load_bundle(path)
    trimmed = trim_bundle(bundle)
    del bundle
    patient = patient_of(trimmed)
    return PatientFile(
        source=path,
        stem=stem,
        trimmed=trimmed,
        name=patient_name(patient),
        active=active_codes(trimmed),
        deceased=is_deceased(patient),
        stopped_active=stopped_and_active_codes(trimmed),
        rank=rank_key(path.name, seed),
    )


def rank_key(file_name: str, seed: str) -> str:
    return hashlib.sha256(f"{file_name}\x00{seed}".encode("utf-8")).hexdigest()


@dataclass
class Selection:
    chosen: list[PatientFile]
    notes: list[str] = field(default_factory=list)


def select_stratified(patients: Sequence[PatientFile], per_stratum: int) -> Selection:
    """Deterministic per-stratum pick, then swap in deceased / stopped+active patients."""
    by_stratum: dict[str, list[PatientFile]] = {s: [] for s in STRATA}
    for p in patients:
        by_stratum[p.stratum].append(p)
    for cands in by_stratum.values():
        cands.sort(key=lambda p: (p.rank, p.out_name))
    picked = {s: list(c[:per_stratum]) for s, c in by_stratum.items()}
    notes: list[str] = []

    def ensure(label: str, has, minimum: int) -> None:
        def count() -> int:
            return sum(has(p) for ps in picked.values() for p in ps)

        extras = [
            p
            for s in STRATA
            for p in by_stratum[s]
            if has(p) and p not in picked[s]
        ]
        extras.sort(key=lambda p: (p.rank, p.out_name))
        for cand in extras:
            if count() >= minimum:
                break
            group = picked[cand.stratum]
            # drop the lowest-ranked pick that carries no required feature
            victims = [
                p for p in group if not p.deceased and not p.has_stopped_active
            ]
            if not victims:
                continue
            victim = victims[-1]
            group.remove(victim)
            group.append(cand)
            group.sort(key=lambda p: (p.rank, p.out_name))
            notes.append(
                f"stratum {cand.stratum}: swapped in {cand.out_name} ({label}) "
                f"for {victim.out_name}"
            )
        available = sum(has(p) for p in patients)
        if count() < minimum:
            notes.append(
                f"only {count()} {label} patient(s) selected "
                f"({available} available; wanted {minimum})"
            )

    ensure("deceased", lambda p: p.deceased, MIN_DECEASED)
    ensure("stopped+active", lambda p: p.has_stopped_active, MIN_STOPPED_ACTIVE)

    for s in STRATA:
        if len(by_stratum[s]) < per_stratum:
            notes.append(
                f"stratum {s}: only {len(by_stratum[s])} candidate(s), "
                f"fewer than {per_stratum} requested; took all"
            )
    chosen = [p for s in STRATA for p in picked[s]]
    return Selection(chosen=chosen, notes=notes)


# --------------------------------------------------------------------------
# reporting
# --------------------------------------------------------------------------


def format_table(available: Sequence[PatientFile], chosen: Sequence[PatientFile]) -> str:
    header = f"{'stratum':<8} {'selected/available':>18} {'deceased':>10} {'stopped+active':>15}"
    lines = [header, "-" * len(header)]

    def row(label: str, avail: Sequence[PatientFile], sel: Sequence[PatientFile]) -> str:
        return (
            f"{label:<8} {f'{len(sel)}/{len(avail)}':>18} "
            f"{f'{sum(p.deceased for p in sel)}/{sum(p.deceased for p in avail)}':>10} "
            f"{f'{sum(p.has_stopped_active for p in sel)}/{sum(p.has_stopped_active for p in avail)}':>15}"
        )

    for s in STRATA:
        lines.append(
            row(
                s,
                [p for p in available if p.stratum == s],
                [p for p in chosen if p.stratum == s],
            )
        )
    lines.append("-" * len(header))
    lines.append(row("total", available, chosen))
    lines.append("(deceased and stopped+active columns: selected/available)")
    return "\n".join(lines)


def describe(p: PatientFile) -> str:
    flags = []
    if p.deceased:
        flags.append("deceased")
    if p.has_stopped_active:
        flags.append("stopped+active:" + ",".join(sorted(p.stopped_active)))
    return (
        f"{p.out_name}  [{p.name}; active={len(p.active)}; stratum {p.stratum}"
        + (f"; {'; '.join(flags)}" if flags else "")
        + "]"
    )


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Trim Synthea R4 bundles into deterministic groundeval fixtures."
    )
    parser.add_argument(
        "--source",
        action="append",
        required=True,
        type=Path,
        help="folder of Synthea bundles (.json / .json.gz); repeatable",
    )
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    parser.add_argument(
        "--select",
        choices=("stratified", "all"),
        default="stratified",
        help="stratified by distinct active RxNorm codes (default) or all files",
    )
    parser.add_argument(
        "--per-stratum", type=int, default=10, help="patients per stratum (default 10)"
    )
    parser.add_argument(
        "--seed", default="0", help="seed mixed into the selection ranking (default 0)"
    )
    return parser


def collect(
    sources: Iterable[Path], seed: str, err: TextIO
) -> list[PatientFile]:
    patients: list[PatientFile] = []
    seen: dict[str, Path] = {}
    for source in sources:
        if not source.is_dir():
            print(f"warning: {source}: source folder not found, skipped", file=err)
            continue
        for path in iter_bundle_files(source):
            stem = output_stem(path.name)
            assert stem is not None
            if stem in seen:
                print(
                    f"warning: {path}: skipped, output name {stem}.json already "
                    f"taken by {seen[stem]}",
                    file=err,
                )
                continue
            try:
                patients.append(analyse(path, stem, seed))
            except BundleError as exc:
                print(f"warning: {path}: skipped: {exc}", file=err)
                continue
            seen[stem] = path
    return patients


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out, err = sys.stdout, sys.stderr
    if args.per_stratum < 0:
        print("error: --per-stratum must be >= 0", file=err)
        return 2

    patients = collect(args.source, str(args.seed), err)
    if not patients:  # never "wrote 0 file(s)" and exit 0 for a wrong --source
        where = ", ".join(str(s) for s in args.source)
        print(f"error: no readable Synthea bundle (.json or .json.gz) in --source {where}; "
              f"nothing written to {args.out}", file=err)
        return 2
    if args.select == "all":
        selection = Selection(chosen=list(patients))
    else:
        selection = select_stratified(patients, args.per_stratum)

    written: list[tuple[PatientFile, int]] = []
    for p in selection.chosen:
        data = dump_json(p.trimmed)
        write_atomic(args.out / p.out_name, data)
        written.append((p, len(data)))

    mode = (
        f"stratified, {args.per_stratum} per stratum, seed {args.seed}"
        if args.select == "stratified"
        else "all"
    )
    print(f"selection: {mode}; {len(patients)} readable bundle(s)", file=out)
    print(format_table(patients, selection.chosen), file=out)
    for note in selection.notes:
        print(f"note: {note}", file=out)
    total = sum(n for _, n in written)
    print(f"wrote {len(written)} file(s), {total} bytes, to {args.out}:", file=out)
    for p, n in written:
        print(f"  {n:>8}  {describe(p)}", file=out)
    if args.out.resolve() == (ROOT / "fixtures" / "synthea").resolve():  # the bundled suites' bundles
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from make_shipped_verdicts import main as ship_verdicts

        return ship_verdicts([])  # their verdicts, shipped with the package (fhir/shipped.py)
    return 0


if __name__ == "__main__":
    sys.exit(main())
