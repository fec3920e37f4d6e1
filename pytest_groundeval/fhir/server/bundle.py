"""The FHIR server as it ships: ``server.bundle.js``, one file holding ``server.js``, its npm
dependencies (installed from ``package-lock.json``) and Medplum's R4 definitions, built by
``scripts/build_fhir_server.py`` with ``build.mjs``. A run needs Node and this file, nothing
from npm and no network.

Its first line records what it was built from: the sha256 of each source (the lockfile among
them), the bundler's version and the Node that ran it, so a source changed without a rebuild
is seen (:func:`stale`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "server.bundle.js"
LOCKFILE = "package-lock.json"
#: the files the bundle is made from (in this folder): a change to any of them needs a rebuild
SOURCES = ("server.js", "build.mjs", "package.json", LOCKFILE)
MARK = "// groundeval-fhir-server-bundle "


def digests(folder: Path = HERE) -> dict[str, str]:
    """The sha256 of each source file, by name."""
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in SOURCES}


def header_line(esbuild: str, node: str, folder: Path = HERE) -> str:
    sources = digests(folder)
    record = {"lock_sha256": sources[LOCKFILE], "sources": sources, "esbuild": esbuild, "node": node}
    return MARK + json.dumps(record, sort_keys=True) + "\n"


def read_header(path: Path = BUNDLE) -> dict[str, Any] | None:
    """What the bundle's first line records, or None when the file is missing or has no header."""
    try:
        with path.open("r", encoding="utf-8") as f:
            first = f.readline()
    except OSError:
        return None
    if not first.startswith(MARK):
        return None
    try:
        record = json.loads(first[len(MARK):])
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def stale(path: Path = BUNDLE, folder: Path = HERE) -> list[str]:
    """Why the bundle does not match its sources ([] when it does): each source whose hash
    differs from the one the bundle recorded, or the bundle missing or without its header."""
    record = read_header(path)
    if record is None:
        return [f"{path.name} is missing or has no build header"]
    recorded = record.get("sources") or {}
    why = [f"{name} changed since the bundle was built" for name, digest in digests(folder).items()
           if recorded.get(name) != digest]
    if record.get("lock_sha256") != recorded.get(LOCKFILE):
        why.append("the header's lock_sha256 is not its package-lock.json digest")
    return why
