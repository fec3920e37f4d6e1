"""FHIR R4B Bundles built and validated once per content hash.

HealthChain's ``load_bundle(data, version="R4B")`` validates a bundle entry by entry (so
its report names every bad entry) and then validates the whole Bundle again to return it:
every resource is built twice (FRICTION.md). Here a bundle is validated once, with the
checks ``load_bundle`` makes:

1. ``fhir.resources`` R4B ``Bundle.model_validate(data)``, once: structure, types,
   required and unknown fields of the Bundle and of every entry's resource;
2. HealthChain's required-binding check of primitive ``code`` fields
   (``healthchain.fhir.validation._check_bindings``), over the built Bundle: the same walk
   ``load_bundle`` makes over the skeleton and over each entry, with the same paths.

A bundle that passes both is valid (``load_bundle`` would return the same Bundle). A bundle
that fails either is handed to ``load_bundle`` itself, so its rejection (HealthChain's
report, every issue, HealthChain's wording) is exactly what it was before; that costs the
second build only for a bundle that is bad anyway.

Memo: a verdict per content hash, process-wide (the verdicts of all; the last few Bundles a
case used, for the next case of the same bundle: a Bundle no case asks for dies with its
case, as a plain test's would), and on disk when a folder is configured (the plugin configures
``<rootdir>/.groundeval/bundles``): one file per content hash and version set (the
``fhir.resources``, ``healthchain``, ``pydantic`` and Python versions are in the key, so an
upgrade re-validates), holding the verdict and, for a valid bundle, the built Bundle
(pickled). Files are written atomically (temp file + ``os.replace``; xdist workers never
see half a file) and carry a SHA-256 of their payload: a file that is truncated, garbled
or of another format is ignored and rebuilt, never trusted. A bundle edited in place has a
new hash: it is validated again. The plugin's memo writes its files on a background
thread (off the item path: verdicts handed over in batches, at most a few Bundles waiting,
the rest left unstored), flushed at the end of the session and of the process.

Before validating, a verdict is looked up in the verdicts shipped with the package (the
bundled suites', ``fhir/shipped.py``: used only under the very versions they were computed
with) and, for a bundle handed out ahead of the items (``fhir/warmup.py``), waited for; a
validation ahead of the items is claimed with a lock on its key in the folder, so no bundle is
validated twice, even across xdist workers (:meth:`BundleMemo.validate_claimed`).

A verdict read from disk needs no Bundle: a prompt-only agent's case builds nothing; the
Bundle is unpickled (or built) only when the baseline or a tool asks for it
(:meth:`Verdict.bundle`).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import pickle
import queue
import sys
import threading
from collections import OrderedDict
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson

MAGIC = b"groundeval-bundle 1\n"
VALIDATION_LOG = "GROUNDEVAL_VALIDATION_LOG"  # a file: one line per bundle validated (pid, key)
SHIPPED_ENV = "GROUNDEVAL_SHIPPED_VERDICTS"  # off: the shipped verdicts are not used (every bundle validated)
MAX_ISSUES = 3  # validation issues a case error names (then "and N more")
KEEP_BUILT = 8  # Bundles a case used, kept in the process memo (e.g. the cases of one patient; the rest: verdicts only)


class InvalidBundle(Exception):
    """A bundle ``load_bundle`` rejects; ``issues`` is the case error's text after the file name."""

    def __init__(self, issues: str) -> None:
        super().__init__(issues)
        self.issues = issues


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "none"


# groundeval's own part of a verdict (build(), _binding_issues(), describe()): raise it when
# they change, so no verdict of the old rules is trusted (shipped or stored)
RULES = 1
#: the packages whose code gives a verdict (fhir.resources builds on fhir-core and pydantic;
#: HealthChain's binding check and its rejection's words)
VALIDATORS = ("fhir.resources", "fhir-core", "healthchain", "pydantic", "pydantic-core")

_VERDICT_VERSIONS: str | None = None
_VERSIONS: str | None = None


def verdict_versions() -> str:
    """What a verdict depends on besides the bundle's bytes: the validating packages'
    versions and groundeval's rules (the key of the shipped verdicts, :mod:`shipped`)."""
    global _VERDICT_VERSIONS
    if _VERDICT_VERSIONS is None:
        _VERDICT_VERSIONS = ";".join(f"{d}={_version(d)}" for d in VALIDATORS) + f";rules={RULES};R4B"
    return _VERDICT_VERSIONS


def versions() -> str:
    """What a stored entry depends on besides the bundle's bytes: the verdict's versions and
    Python's (an entry may hold a pickled Bundle)."""
    global _VERSIONS
    if _VERSIONS is None:
        _VERSIONS = f"{verdict_versions()};python={sys.version_info[0]}.{sys.version_info[1]}"
    return _VERSIONS


def describe(e: BaseException) -> str:
    """A ``load_bundle`` rejection as the case error says it (after ``<file>: ``)."""
    from healthchain.fhir import FHIRValidationError
    from pydantic import ValidationError

    if isinstance(e, FHIRValidationError):
        issues = [f"{i.expression or i.code}: {i.diagnostics}" for i in e.report.issues]
        more = f" (and {len(issues) - MAX_ISSUES} more)" if len(issues) > MAX_ISSUES else ""
        return (f"not a valid FHIR R4B Bundle ({len(issues)} issue{'s' * (len(issues) != 1)}): "
                + "; ".join(issues[:MAX_ISSUES]) + more)
    if isinstance(e, ValidationError):  # load_bundle's final model_validate (its own checks passed)
        return (f"not a valid FHIR R4B Bundle: {e.error_count()} issue(s): "
                + "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors()[:MAX_ISSUES]))
    raise e


def build(data: Any) -> Any:
    """``data`` (a parsed Bundle) validated once and built: the R4B Bundle ``load_bundle(data,
    version="R4B")`` returns, or :class:`InvalidBundle` with its rejection."""
    from fhir.resources.R4B.bundle import Bundle

    if isinstance(data, dict) and data.get("resourceType") == "Bundle":
        try:
            bundle = Bundle.model_validate(data)
        except Exception:  # noqa: BLE001 - ValidationError, or fhir_core's KeyError on an unknown resource type:
            bundle = None  # HealthChain's load_bundle gives the verdict (below)
        if bundle is not None and not _binding_issues(bundle):
            return bundle
    return _reject(data)


def issues_of(raw: bytes) -> str | None:
    """The verdict on the bundle ``raw``: None (valid) or its rejection (:func:`build`)."""
    try:
        build(orjson.loads(raw))
    except InvalidBundle as e:
        return e.issues
    return None


def _reject(data: Any) -> Any:
    """HealthChain's own verdict on a bundle the single pass found bad (its report, its words)."""
    from healthchain.fhir import FHIRValidationError, load_bundle
    from pydantic import ValidationError

    try:
        return load_bundle(data, version="R4B")  # (not expected: the checks above are its checks)
    except (FHIRValidationError, ValidationError) as e:
        raise InvalidBundle(describe(e)) from None


_PLANS: dict[type, tuple[dict[str, frozenset], tuple[str, ...]]] = {}


def _plan(cls: type) -> tuple[dict[str, frozenset], tuple[str, ...]]:
    """``({field name: its required binding's allowed values}, the fields with a default other
    than None)`` for ``cls``, read once per class the way HealthChain's ``_check_bindings``
    reads the bindings (``json_schema_extra["enum_values"]``)."""
    plan = _PLANS.get(cls)
    if plan is None:
        bindings = {}
        defaulted = []
        for name, field in cls.model_fields.items():
            extra = field.json_schema_extra
            enum_values = extra.get("enum_values") if isinstance(extra, dict) else None
            if enum_values:
                bindings[name] = frozenset(enum_values)
            if field.default is not None or field.default_factory is not None:
                defaulted.append(name)
        plan = _PLANS[cls] = (bindings, tuple(defaulted))
    return plan


def _binding_issues(model: Any) -> bool:
    """Whether HealthChain's binding check (``healthchain.fhir.validation._check_bindings``,
    which ``load_bundle`` runs on the skeleton and on each entry's resource) finds an issue
    anywhere in the built Bundle: the same walk (every field with a value; a field with
    required-binding values checks its string values and is not descended into, any other
    model or list of models is), answering only whether there is one (the wording comes from
    HealthChain itself, :func:`_reject`), with each class's bindings read once.

    A field holds a value other than None only if the input gave it (pydantic's
    ``__pydantic_fields_set__``, which an assignment after validation joins too) or its
    default is not None: the walk visits those fields only (a FHIR model has 10-40 fields, a
    Synthea resource's sets 1-3 of them), reading the values from the model's ``__dict__``
    (exactly its fields: pydantic keeps extras and private attributes apart)."""
    from pydantic import BaseModel

    plans = _PLANS
    stack = [model]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        m = pop()
        cls = type(m)
        plan = plans.get(cls)
        if plan is None:
            plan = _plan(cls)
        bindings, defaulted = plan
        values = m.__dict__
        names = m.__pydantic_fields_set__
        if defaulted:
            names = names.union(defaulted)
        for name in names:
            value = values.get(name)
            if value is None:
                continue
            enum_values = bindings.get(name) if bindings else None
            if enum_values is not None:
                for item in value if isinstance(value, list) else (value,):
                    if isinstance(item, str) and item not in enum_values:
                        return True
            elif isinstance(value, BaseModel):
                push(value)
            elif isinstance(value, list):
                extend(item for item in value if isinstance(item, BaseModel))
    return False


class Verdict:
    """One bundle's validation result: valid (:meth:`bundle` gives the Bundle, built or
    unpickled on first use) or ``issues`` (the rejection)."""

    __slots__ = ("key", "issues", "_bundle", "_blob", "_raw", "_memo", "_lock", "_stored", "_kept")

    def __init__(self, key: str, issues: str | None, bundle: Any = None, blob: bytes | None = None,
                 raw: bytes | None = None, memo: "BundleMemo | None" = None, kept: bool = False) -> None:
        self.key = key
        self.issues = issues
        self._bundle = bundle
        self._blob = blob  # the pickled Bundle read from disk, not yet unpickled
        self._raw = raw  # the bundle's bytes, to build it if the stored Bundle does not load
        self._memo = memo
        self._lock = threading.Lock()
        self._stored = blob is not None  # the Bundle itself is on disk (not only the verdict)
        self._kept = kept  # the Bundle is in the memo's few built ones

    @property
    def valid(self) -> bool:
        return self.issues is None

    def bundle(self) -> Any:
        """The built R4B Bundle (valid verdicts only)."""
        if self.issues is not None:
            raise InvalidBundle(self.issues)
        with self._lock:
            if self._bundle is None:
                bundle = None
                if self._blob is not None:
                    try:
                        bundle = _unpickle(self._blob)
                    except Exception:  # noqa: BLE001 - a stored Bundle that does not load: rebuild
                        bundle = None
                        self._stored = False
                if bundle is None:
                    bundle = build(orjson.loads(self._raw))  # (raises InvalidBundle if it is not valid)
                    if self._memo is not None:
                        self._memo.built_again(self.key, bundle, broken=self._blob is not None)
                elif self._memo is not None:
                    self._memo.keep(self.key, bundle, stored=True)
                self._bundle, self._blob, self._raw, self._kept = bundle, None, None, True
            elif not self._kept and self._memo is not None:
                # built by the validation and used (the baseline, a tool agent): kept for the
                # next case of the same bundle; one no one asks for dies with its case
                self._kept = True
                self._memo.keep(self.key, self._bundle)
            if not self._stored and self._memo is not None:
                # used (the baseline, a tool agent): stored with the verdict, so a re-run
                # unpickles it instead of building it; a prompt-only run never pays for this
                self._stored = True
                self._memo.store_bundle(self.key, self._bundle)
            return self._bundle


def _unpickle(blob: bytes) -> Any:
    from fhir.resources.R4B.bundle import Bundle

    value = pickle.loads(blob)
    if type(value) is not Bundle:
        raise TypeError(f"stored value is a {type(value).__name__}, not an R4B Bundle")
    return value


class _Writer:
    """The on-disk entries written on one background thread, in order, the verdicts handed
    over in batches of :attr:`BATCH` (one thread wake-up per batch, not per entry: a wake-up
    per entry cost the item path a GIL hand-off each; an entry holding a Bundle goes at once,
    so no Bundle is kept alive waiting for its batch): a file write costs the item path nothing
    (the disk calls release the GIL), and :meth:`flush` hands over the last, partial batch
    and waits for every entry handed in so far (the end of a session, so the next one reads
    them)."""

    BATCH = 64
    MAX_BUNDLES = 8  # Bundles waiting to be pickled and written; beyond, a Bundle is not stored

    def __init__(self, write: Any) -> None:
        self._write = write
        self._bundles = 0  # Bundles handed over, not yet written
        self._queue: "queue.Queue[list[tuple[str, str | None, Any]] | None]" = queue.Queue()
        self._pending: list[tuple[str, str | None, Any]] = []
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def put(self, job: tuple[str, str | None, Any]) -> bool:
        """A verdict waits for its batch; a Bundle goes at once (with the batch so far, in
        order), so the writer never holds more than one batch of small entries back. A Bundle
        is refused (False) while :attr:`MAX_BUNDLES` wait: the writer pickles under the GIL,
        and where every case uses its Bundle (the baseline) it falls behind the item path, each
        waiting Bundle held in memory (a 2,000-case run queued 200); the refused one is only
        built again by the next run that needs it."""
        with self._lock:
            if job[2] is not None:
                if self._bundles >= self.MAX_BUNDLES:
                    return False
                self._bundles += 1
            self._pending.append(job)
            if len(self._pending) < self.BATCH and job[2] is None:
                return True
            batch, self._pending = self._pending, []
            self._hand(batch)
        return True

    def _hand(self, batch: list[tuple[str, str | None, Any]]) -> None:  # with the lock held
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True, name="groundeval-bundles")
            self._thread.start()
        self._queue.put(batch)

    def _run(self) -> None:
        while True:
            batch = self._queue.get()
            try:
                if batch is None:
                    return
                for i, job in enumerate(batch):
                    batch[i] = None  # (a written Bundle is not held while the rest of the batch is)
                    try:
                        self._write(*job)
                    except Exception:  # noqa: BLE001 - a cache that cannot be written is only a slower next run
                        pass
                    finally:
                        if job[2] is not None:
                            with self._lock:
                                self._bundles -= 1
                    del job
            finally:
                self._queue.task_done()

    def flush(self) -> None:
        with self._lock:
            if self._pending:
                batch, self._pending = self._pending, []
                self._hand(batch)
            thread = self._thread
        if thread is not None:
            self._queue.join()

    def close(self) -> None:
        self.flush()
        with self._lock:
            if self._thread is not None:
                self._queue.put(None)
                self._thread = None


class BundleMemo:
    """Verdicts by content hash: process-wide, and under ``folder`` when one is set
    (``background``: its entries written on a thread of their own, :class:`_Writer`)."""

    def __init__(self, folder: Path | None = None, background: bool = False, shipped: Path | None = None) -> None:
        self.folder = Path(folder) if folder is not None else None
        self._folder_text = str(self.folder) if self.folder is not None else ""
        self._shipped_path = shipped  # the package's shipped verdicts (fhir/shipped.py); None: none
        self._shipped: dict[str, str | None] | None = None  # read on first use
        self._pending: dict[str, Any] = {}  # key -> the Future of its validation ahead of the items (warmup.py)
        self._verdicts: dict[str, tuple[str | None]] = {}  # key -> (issues,)
        self._built: "OrderedDict[str, Any]" = OrderedDict()  # key -> Bundle, the last KEEP_BUILT used
        self._bundle_stored: set[str] = set()  # keys whose Bundle this process stored
        self._made: set[Path] = set()  # entry folders known to exist
        self._lock = threading.Lock()
        self._writer = _Writer(self._write_now) if background and self.folder is not None else None
        self.builds = 0  # bundles validated here (the counters the tests read)
        self.disk_hits = 0
        self.disk_rejected = 0  # stored entries found corrupt and ignored
        self.shipped_hits = 0  # verdicts taken from the shipped file

    @staticmethod
    def key(content_hash: str) -> str:
        return hashlib.sha256(f"{content_hash}\n{versions()}".encode()).hexdigest()

    def path(self, key: str) -> Path | None:
        return None if self.folder is None else Path(self._entry_file(key))

    def _entry_file(self, key: str) -> str:
        """Where the entry of ``key`` is, as text (no ``Path`` built: looked up for every case)."""
        return os.path.join(self._folder_text, key[:2], key + ".bin")

    def verdict(self, raw: bytes, content_hash: str, data: Any = None) -> Verdict:
        """The verdict on the bundle ``raw`` (``data``: its parsed JSON, if the caller has it).
        The Bundle a validation builds goes with the verdict only: the memo keeps it (for the
        next case of the same bundle) once a case uses it, so a prompt-only run holds no
        Bundle beyond its case (nor makes the garbage collector walk one)."""
        key = self.key(content_hash)
        with self._lock:
            known = self._verdicts.get(key)
            if known is not None:
                if known[0] is not None:
                    return Verdict(key, known[0])
                bundle = self._built.get(key)
                if bundle is not None:
                    self._built.move_to_end(key)
                    return Verdict(key, None, bundle=bundle, memo=self, kept=True)
        stored = self._read(key)  # (first: a stored entry may hold the built Bundle too)
        if stored is not None:
            issues, blob = stored
            with self._lock:
                self._verdicts[key] = (issues,)
                self.disk_hits += 1
            return Verdict(key, issues, blob=blob, raw=raw, memo=self)
        if known is not None:  # valid, known here, not on disk (yet): built when a case asks
            return Verdict(key, None, raw=raw, memo=self)
        got = self._ahead(key, raw, content_hash)  # shipped, or validated ahead of the items
        if got is not None:
            return Verdict(key, got[0], raw=raw, memo=self)
        if data is None:
            data = orjson.loads(raw)
        try:
            bundle, issues = build(data), None
        except InvalidBundle as e:
            bundle, issues = None, e.issues
        self._validated(key)
        with self._lock:
            self._verdicts[key] = (issues,)
        self._write(key, issues, None)  # the verdict; the Bundle too once a case uses it (Verdict.bundle)
        return Verdict(key, issues, bundle=bundle, memo=self)

    def flush(self) -> None:
        """Every entry handed to the background writer is on disk."""
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()

    def keep(self, key: str, bundle: Any, stored: bool = False) -> None:
        with self._lock:
            if stored:
                self._bundle_stored.add(key)
            self._built[key] = bundle
            self._built.move_to_end(key)
            while len(self._built) > KEEP_BUILT:
                self._built.popitem(last=False)

    def built_again(self, key: str, bundle: Any, broken: bool) -> None:
        """A valid bundle built after its verdict came from disk (only the verdict was stored,
        or a stored Bundle that did not unpickle, its checksum right: ``broken``)."""
        with self._lock:
            self.disk_rejected += broken
        self._validated(key)
        self.keep(key, bundle)

    def _validated(self, key: str) -> None:
        """One validation done here (the counters; ``$GROUNDEVAL_VALIDATION_LOG``: a line
        ``<pid> <key>`` appended, across processes, for a diagnosis or a test)."""
        with self._lock:
            self.builds += 1
        log = os.environ.get(VALIDATION_LOG)
        if log:
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{os.getpid()} {key}\n".encode())
            finally:
                os.close(fd)

    # -- verdicts known before the item asks: shipped with the package, or validated ahead --
    def shipped(self, content_hash: str) -> tuple[str | None] | None:
        """``(issues,)`` from the shipped verdicts (computed with these very versions), else None."""
        if self._shipped_path is None:
            return None
        if self._shipped is None:
            from pytest_groundeval.fhir import shipped

            self._shipped = shipped.load(self._shipped_path, verdict_versions())
        if content_hash not in self._shipped:
            return None
        return (self._shipped[content_hash],)

    def known(self, content_hash: str) -> bool:
        """Has a verdict without validating: in this process, shipped, or (probably) on disk."""
        key = self.key(content_hash)
        if key in self._verdicts or key in self._pending or self.shipped(content_hash) is not None:
            return True
        return self.folder is not None and os.path.exists(self._entry_file(key))

    def expect(self, content_hash: str, future: Any) -> None:
        """The verdict on ``content_hash`` is on its way (``future``: ``(issues,)``, or None when
        another process holds its claim); an item asking for it waits for it."""
        self._pending[self.key(content_hash)] = future

    def forget_pending(self) -> None:
        self._pending = {}

    def _ahead(self, key: str, raw: bytes, content_hash: str) -> tuple[str | None] | None:
        """A verdict not validated on the item path: shipped, or validated ahead (waited for)."""
        got = self.shipped(content_hash)
        if got is not None:
            with self._lock:
                self.shipped_hits += 1
        else:
            future = self._pending.get(key)
            if future is None:
                return None
            try:
                got = future.result()
            except BaseException:  # noqa: BLE001 - cancelled, a worker process that died: validated below
                got = None
            if got is None:  # another process claimed it (or the work was lost): its entry, or validated here
                got = self.validate_claimed(raw, content_hash, wait=True)
        with self._lock:
            self._verdicts[key] = got
        return got

    def validate_claimed(self, raw: bytes, content_hash: str, wait: bool) -> tuple[str | None] | None:
        """``(issues,)`` for ``raw``, validated at most once across every process sharing the
        folder: under an exclusive lock on its key (``flock``), after looking on disk again, and
        on disk before the lock is released. ``wait`` False: None when another process holds it."""
        key = self.key(content_hash)
        stored = self._read(key)
        if stored is not None:
            return (stored[0],)
        if self.folder is None:
            return (self._validate_raw(key, raw),)
        with _claim(self.folder / "locks" / key[:2] / key, wait) as claimed:
            if not claimed:
                return None
            stored = self._read(key)
            if stored is not None:
                return (stored[0],)
            issues = self._validate_raw(key, raw)
            self._write_now(key, issues, None)
            return (issues,)

    def _validate_raw(self, key: str, raw: bytes) -> str | None:
        issues = issues_of(raw)
        self._validated(key)
        return issues

    def store_bundle(self, key: str, bundle: Any) -> None:
        with self._lock:
            if key in self._bundle_stored:
                return
            self._bundle_stored.add(key)
        if not self._write(key, None, bundle):  # the writer is behind: not stored (a later use may)
            with self._lock:
                self._bundle_stored.discard(key)

    # -- disk --
    def _read(self, key: str) -> tuple[str | None, bytes | None] | None:
        if self.folder is None:
            return None
        try:
            with open(self._entry_file(key), "rb") as fh:
                blob = fh.read()
        except OSError:
            return None
        entry = _parse_entry(blob, key)
        if entry is None:
            with self._lock:
                self.disk_rejected += 1
        return entry

    def _write(self, key: str, issues: str | None, bundle: Any) -> bool:
        """False: the background writer refused a Bundle (too many wait); it is not stored."""
        if self.folder is None:
            return True
        if self._writer is not None:
            return self._writer.put((key, issues, bundle))
        self._write_now(key, issues, bundle)
        return True

    def _write_now(self, key: str, issues: str | None, bundle: Any) -> None:
        path = self.path(key)
        if path is None:
            return
        try:
            if issues is not None:
                payload = b"E" + issues.encode("utf-8")
            elif bundle is None:
                payload = b"V"
            else:
                payload = b"B" + pickle.dumps(bundle, protocol=pickle.HIGHEST_PROTOCOL)
            blob = MAGIC + key.encode() + b"\n" + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload
            # a temp name no other process or thread uses (pid, thread), then an atomic replace
            tmp = path.parent / f".tmp-{os.getpid()}-{threading.get_ident()}-{path.name}"
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
            if path.parent not in self._made:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._made.add(path.parent)
            try:
                fd = os.open(tmp, flags, 0o644)
            except FileNotFoundError:  # the folder was removed since (a cleaned cache)
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(tmp, flags, 0o644)
            try:
                try:
                    view = memoryview(blob)
                    while view:
                        view = view[os.write(fd, view):]
                finally:
                    os.close(fd)
                os.replace(tmp, path)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        except (OSError, pickle.PicklingError, TypeError, ValueError, RecursionError):
            pass  # a cache that cannot be written is only a slower next run


def _parse_entry(blob: bytes, key: str) -> tuple[str | None, bytes | None] | None:
    """``(issues, pickled Bundle or None)`` from a stored entry (E: the issues; V: valid; B:
    valid, and the pickled Bundle), or None if it is not one
    (wrong magic or key, a payload whose SHA-256 does not match, unknown kind)."""
    if not blob.startswith(MAGIC):
        return None
    head = len(MAGIC)
    nl1 = blob.find(b"\n", head)
    nl2 = blob.find(b"\n", nl1 + 1) if nl1 >= 0 else -1
    if nl2 < 0 or blob[head:nl1] != key.encode():
        return None
    payload = blob[nl2 + 1:]
    if not payload or hashlib.sha256(payload).hexdigest().encode() != blob[nl1 + 1:nl2]:
        return None
    kind, body = payload[:1], payload[1:]
    if kind == b"E":
        try:
            return body.decode("utf-8"), None
        except UnicodeDecodeError:
            return None
    if kind == b"V" and not body:
        return None, None
    if kind == b"B" and body:
        return None, body
    return None


@contextlib.contextmanager
def _claim(path: Path, wait: bool) -> Any:
    """An exclusive ``flock`` on ``path`` (True), or False when ``wait`` is False and another
    process (or open file) holds it. The kernel releases it if its holder dies."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _shipped_path() -> Path | None:
    from pytest_groundeval.fhir import shipped

    return None if os.environ.get(SHIPPED_ENV, "").lower() in ("0", "off", "no", "false") else shipped.PATH


_MEMO = BundleMemo(shipped=_shipped_path())


def configure(folder: Path | None) -> None:
    """Use ``folder`` for the on-disk entries (None: the process memo only), written on a
    background thread (:func:`flush` waits for them; so does the end of the process). The
    verdicts already known in this process are kept (they do not depend on the folder)."""
    global _MEMO
    if os.environ.get("GROUNDEVAL_BUNDLE_CACHE", "").lower() in ("0", "off", "no", "false"):
        folder = None
    if (folder is None and _MEMO.folder is None) or (folder is not None and _MEMO.folder == Path(folder)):
        return
    _MEMO.close()
    _MEMO = BundleMemo(folder, background=True, shipped=_shipped_path())


def flush() -> None:
    """The process memo's pending entries written (the end of a session)."""
    _MEMO.flush()


atexit.register(flush)


def memo() -> BundleMemo:
    return _MEMO


def verdict(raw: bytes, content_hash: str, data: Any = None) -> Verdict:
    return _MEMO.verdict(raw, content_hash, data)


def _text_verdict(text: str) -> Verdict:
    raw = text.encode("utf-8")
    return verdict(raw, "sha256:" + hashlib.sha256(raw).hexdigest())


def loaded_or_text(text: str) -> Any:
    """The built Bundle of a valid bundle's JSON text (through the memo), else the text itself."""
    v = _text_verdict(text)
    return v.bundle() if v.valid else text


def load_text(text: str) -> Any:
    """A bundle's JSON text as a built R4B Bundle, through the memo; a bundle
    ``load_bundle`` rejects raises what ``load_bundle`` raises (it is asked again)."""
    v = _text_verdict(text)
    if not v.valid:
        from healthchain.fhir import load_bundle

        return load_bundle(orjson.loads(text), version="R4B")  # raises its own error, as before
    return v.bundle()
