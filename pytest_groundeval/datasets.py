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

from .model import CaseError, CaseRef

__all__ = ["CaseError", "CaseRef", "content_hash", "discover_files", "load_json", "read_bytes"]

BUNDLE_SUFFIXES = (".json.gz", ".json")


def read_bytes(path: Path) -> bytes:
    """File bytes, transparently gunzipped for ``.gz``."""
    try:
        data = path.read_bytes()
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


def discover_files(folder: Path, task: str, suffixes: tuple[str, ...] = BUNDLE_SUFFIXES) -> list[CaseRef]:
    """One case per ``*.json`` / ``*.json.gz`` file in ``folder`` (not recursive), id = file stem.

    Two files with the same stem (``a.json`` and ``a.json.gz``) would give two items the same
    id, so that is refused here with both names; so is a folder with no case file at all."""
    if not folder.is_dir():
        raise FileNotFoundError(f"groundeval: {task} cases folder not found: {folder}")
    seen: dict[str, Path] = {}
    with os.scandir(folder) as it:
        for entry in it:
            if not entry.name.endswith(suffixes) or not _is_case_file(entry):
                continue
            cid = case_id_for(Path(entry.name))
            if cid in seen:
                raise ValueError(
                    f"groundeval: two case files share the id {cid!r} in {folder}: "
                    f"{seen[cid].name} and {entry.name}; remove or rename one"
                )
            seen[cid] = Path(entry.path)
    if not seen:
        raise ValueError(f"groundeval: no {task} case files ({' or '.join('*' + x for x in suffixes)}) in {folder}")
    return [CaseRef(task=task, case_id=cid, path=seen[cid]) for cid in sorted(seen)]
