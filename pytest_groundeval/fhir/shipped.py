"""The bundled suites' validation verdicts, computed when the package is built and shipped
with it (``shipped_verdicts.json`` beside this module, written by
``scripts/make_shipped_verdicts.py``), so a fresh machine's first run of the bundled suites
validates nothing: it reads as warm.

A verdict is ``fhir/bundles.py``'s own (``bundles.build``: fhir.resources' R4B validation and
HealthChain's binding check, the rejection in HealthChain's words), keyed by the bundle's
content hash. The file holds the versions it was computed with (``bundles.verdict_versions()``:
fhir.resources, fhir-core, healthchain, pydantic, pydantic-core and groundeval's rules) and a
SHA-256 of its verdicts. It is used only when its versions equal the running ones and its
checksum matches; otherwise none of it is trusted and every bundle is validated as before. A
bundle whose content hash is not in it (user data, an edited fixture) is validated as before.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Iterable

from pytest_groundeval.tasks.datasets import content_hash

PATH = Path(__file__).with_name("shipped_verdicts.json")
FORMAT = 1


def _digest(versions: str, verdicts: dict[str, str | None]) -> str:
    blob = json.dumps({"versions": versions, "verdicts": verdicts}, sort_keys=True, ensure_ascii=False,
                      separators=(",", ":"))
    return "sha256:" + hashlib.sha256(blob.encode("utf-8")).hexdigest()


def make(files: Iterable[tuple[str, bytes]], issues_of: Callable[[bytes], str | None], versions: str) -> dict[str, Any]:
    """The shipped document for ``files`` (``(name, bytes)``), each bundle's verdict given by
    ``issues_of`` (``bundles.issues_of``: validated afresh), under ``versions``
    (``bundles.verdict_versions()``)."""
    names: dict[str, str] = {}
    verdicts: dict[str, str | None] = {}
    for name, raw in files:
        digest = names[name] = content_hash(raw)
        if digest not in verdicts:
            verdicts[digest] = issues_of(raw)
    return {"format": FORMAT, "versions": versions, "digest": _digest(versions, verdicts),
            "files": dict(sorted(names.items())), "verdicts": dict(sorted(verdicts.items()))}


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def load(path: Path | None, versions: str) -> dict[str, str | None]:
    """``{content hash: issues or None (valid)}`` from the shipped file at ``path``; empty when
    there is none, it does not parse, its checksum does not match, or it was computed with
    other versions than ``versions`` (then nothing of it is trusted)."""
    if path is None:
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        verdicts = doc["verdicts"]
        if doc.get("format") != FORMAT or doc.get("versions") != versions or not isinstance(verdicts, dict):
            return {}
        if doc.get("digest") != _digest(versions, verdicts):
            return {}
        if not all(isinstance(v, (str, type(None))) for v in verdicts.values()):
            return {}
        return verdicts
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
