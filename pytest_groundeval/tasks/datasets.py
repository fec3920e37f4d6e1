"""Finding case files and loading them lazily.

Collection only lists file names (``os.scandir``); a case's bytes are read when
its item runs. Every problem with a file becomes a :class:`CaseError` naming the
file and what is wrong, so one bad file errors its own case and nothing else.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from pathlib import Path
from typing import Any

import orjson

from pytest_groundeval.model import CaseError, CaseRef

__all__ = ["CaseError", "CaseRef", "case_hash", "content_hash", "discover_case_records", "discover_files", "load_case_record",
           "load_json", "read_bytes"]

BUNDLE_SUFFIXES = (".json.gz", ".json")


def read_bytes(path: Path) -> bytes:
    """File bytes, transparently gunzipped for ``.gz``."""
    try:
        with open(path, "rb", buffering=0) as fh:  # (unbuffered: one sized read, no buffer object per file)
            data = fh.readall()
    except OSError as e:
        raise CaseError(f"{path.name}: cannot read file: {e.strerror or e}") from e
    if path.name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise CaseError(f"{path.name}: not a valid gzip file: {e}") from e
    if data.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark, as some exporters write
        data = data[3:]
    return data


def load_json(path: Path) -> tuple[Any, bytes]:
    """Parse a (possibly gzipped) JSON file; returns (value, raw bytes)."""
    raw = read_bytes(path)
    try:
        return orjson.loads(raw), raw
    except orjson.JSONDecodeError as e:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as u:
            raise CaseError(f"{path.name}: not UTF-8 text (byte 0x{raw[u.start]:02x} at offset {u.start}); "
                            "FHIR JSON is UTF-8: re-encode the file") from None
        if not raw.strip():
            raise CaseError(f"{path.name}: the file is empty") from None
        raise CaseError(f"{path.name}: not valid JSON: {e}") from e


def content_hash(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def case_hash(*parts: bytes) -> str:
    """sha256 over a case's files (its case file, then its bundle), each length-prefixed so no
    two splits of the same bytes collide: a case whose bundle changes is another case."""
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return "sha256:" + h.hexdigest()


def case_id_for(path: Path) -> str:
    name = path.name
    for suffix in BUNDLE_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def _is_case_file(entry: os.DirEntry) -> bool:
    """A regular file, or a link that cannot be followed (dangling, a loop): those are listed
    so that their case errors with the reason, instead of vanishing from the run."""
    try:
        return entry.is_file() or (entry.is_symlink() and not entry.is_dir())
    except OSError:  # e.g. a symlink loop
        return True


def bundle_files(folder: Path) -> list[Path]:
    """The bundle files (``.json`` / ``.json.gz``) directly in ``folder``, by name; none when
    it is not a folder. The case generators (``scripts/make_*_cases.py``) read their source
    with it and refuse an empty one before touching their output folder."""
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if p.is_file() and p.name.endswith(BUNDLE_SUFFIXES)),
                  key=lambda p: p.name)


def no_bundles(folder: Path, option: str, out: Path) -> str:
    """The generators' refusal of a source with no bundle (exit 2, nothing written or deleted)."""
    where = "is not a folder" if not folder.is_dir() else "holds no *.json or *.json.gz bundle"
    return (f"{option} {folder} {where}: give a folder of Synthea R4 bundles (.json or .json.gz); "
            f"nothing written to (or deleted from) {out}")


def discover_files(folder: Path, task: str, suffixes: tuple[str, ...] = BUNDLE_SUFFIXES) -> list[CaseRef]:
    """One case per ``*.json`` / ``*.json.gz`` file in ``folder`` (not recursive), id = file stem.

    Two files with the same stem (``a.json`` and ``a.json.gz``) would give two items the same
    id: that id becomes one item that errors (kind ``case``, naming both files) without
    reading either, and the other cases run. A folder with no case file at all is refused."""
    if not folder.is_dir():
        raise FileNotFoundError(f"groundeval: {task} cases folder not found: {folder}")
    seen: dict[str, list[Path]] = {}
    with os.scandir(folder) as it:
        for entry in it:
            if not entry.name.endswith(suffixes) or not _is_case_file(entry):
                continue
            seen.setdefault(case_id_for(Path(entry.name)), []).append(Path(entry.path))
    if not seen:
        raise ValueError(f"groundeval: no {task} case files ({' or '.join('*' + x for x in suffixes)}) in {folder}")
    refs = []
    for cid in sorted(seen):
        paths = sorted(seen[cid], key=lambda p: p.name)
        meta = {} if len(paths) == 1 else {"problem": (
            f"{' and '.join(p.name for p in paths)}: two case files share the id {cid!r} in {folder}; "
            "remove or rename one (neither was run)")}
        refs.append(CaseRef(task=task, case_id=cid, path=paths[0], meta=meta))
    return refs


def discover_case_records(path: Path, task: str) -> list[CaseRef]:
    """Cases written as JSON objects with a ``case_id``: a folder of ``<case_id>.json`` files
    (one case each, read when its item runs), or one file holding a JSON list of cases (read
    here, since its case ids live inside it). A file holding one case object, or the older
    ``{"cases": [...]}``, is accepted too."""
    if path.is_dir():
        return discover_files(path, task, (".json",))
    if not path.is_file():
        raise FileNotFoundError(f"groundeval: {task} cases not found: {path} (a folder of <case_id>.json "
                                "files or one JSON file holding a list of cases)")
    try:
        data, _ = load_json(path)
    except CaseError as e:
        raise ValueError(f"groundeval: {e}") from None
    items = data.get("cases") if isinstance(data, dict) and "cases" in data else data
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list):
        raise ValueError(f"groundeval: {path.name}: expected a JSON list of {task} cases (objects with a "
                         f"case_id), not {type(items).__name__}")
    if not items:
        raise ValueError(f"groundeval: {path.name}: no {task} cases in it")
    places: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        cid = item.get("case_id") if isinstance(item, dict) else None
        places.setdefault(str(cid or f"{path.stem}[{i}]"), []).append(i)
    refs = []
    for cid, at in places.items():  # a shared id: one item that errors, naming the places
        meta = {} if len(at) == 1 else {"problem": (
            f"{path.name}: duplicate case ids ['{cid}'] at entries {at}; give each case its own "
            "case_id (none of them was run)")}
        refs.append(CaseRef(task=task, case_id=cid, path=path, index=at[0], meta=meta))
    return refs


def load_case_record(ref: CaseRef) -> tuple[Any, bytes, str]:
    """The case object of ``ref`` (from its own file, or its place in a list file), the bytes
    its content hash covers (the file; for a list entry, that entry alone, canonical JSON, so
    editing one case does not change the others'), and how to name it in messages."""
    data, raw = load_json(ref.path)
    if ref.index is None:
        return data, raw, ref.path.name
    source = f"{ref.path.name}[{ref.index}]"
    items = data.get("cases") if isinstance(data, dict) and "cases" in data else data
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list) or ref.index >= len(items):
        raise CaseError(f"{source}: the file changed since collection (no case at this place)")
    item = items[ref.index]
    return item, orjson.dumps(item, option=orjson.OPT_SORT_KEYS), source
