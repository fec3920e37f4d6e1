"""The Python handle of groundeval's FHIR server (``server.bundle.js``: Medplum's FHIR router
over one in-memory repository per case, on 127.0.0.1, with its npm dependencies bundled in:
:mod:`.bundle`). Eval-free: standard library only.

:class:`FhirServer` starts the Node process (:mod:`.node` says which Node) on first use, checks
its health, starts it again when it died, and stops it (``stop``; ``atexit`` and the process's
own group as the safety net; the server also exits by itself when its stdin closes, so a killed
harness leaves nothing listening). Nothing is installed or downloaded at run time.

One case: :meth:`FhirServer.open_case` (a fresh repository seeded with the case's bundle: its
base URL and the state before) → the agent → :meth:`FhirServer.activity` (the request log and
the state after) → :meth:`FhirServer.close_case`.

What keeps one case's repository from another case's agent (a process of the same user, which
can read every process's environment and command line and the user's files): the server's
configuration and control token reach it on its stdin; a case is reached only through a token
made for it here (256 random bits, in the base URL its agent alone is given) and dropped with
it; nothing a case's URL could be derived from is kept in a file. A request naming no open
case is refused (404) and logged (:meth:`FhirServer.refused`).
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any

from pytest_groundeval.fhir.server import bundle
from pytest_groundeval.fhir.server.node import NodeMissing, find_node

SERVER_JS = bundle.BUNDLE  # what runs: server.js and its dependencies in one file
START_LIMIT_S = 60.0  # a safety limit on the server's start, not a speed expectation
DEFAULT_WRITE_CAP = 50
#: the largest request body the server reads (its 413 beyond); a case whose bundle is larger is
#: refused before it is sent (a ``case`` error naming this limit)
MAX_BODY_BYTES = 16 << 20
#: a case's request log is bounded by the bodies it holds (32 MiB: hundreds of whole-record
#: searches, thousands of small requests), not by a count of requests
DEFAULT_LOG_BYTES = 32 << 20


class ServerUnavailable(RuntimeError):
    """The FHIR server cannot run here (no Node, an old Node, its bundle missing): ``permanent``, so
    every case of the session gets the same reason without trying again; or it failed to start
    this once (``permanent`` False)."""

    def __init__(self, reason: str, *, permanent: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.permanent = permanent


class ServerDied(RuntimeError):
    """The server stopped answering during a case (it is started again for the next one)."""


@dataclass(frozen=True)
class ServerCase:
    """One case's repository on the server."""

    id: str  # the server's name for it in control calls (no way in)
    base_url: str  # the FHIR base the agent gets: http://127.0.0.1:PORT/case/<token>/fhir/R4
    before: dict[str, Any]  # the state after seeding: {"Type/id": resource}
    generation: int  # which start of the server holds it (a restart loses every repository)


def check_node(node: str | None = None) -> str:
    """The Node that runs the server (``node``: a system Node asked for, see :mod:`.node`), and
    the bundle present; else ServerUnavailable (permanent), naming the fix."""
    try:
        found = find_node(node)
    except NodeMissing as e:
        raise ServerUnavailable(str(e), permanent=True) from None
    if not SERVER_JS.is_file():
        raise ServerUnavailable(f"the FHIR server's bundle {SERVER_JS} is missing (a broken install): reinstall "
                                "groundeval (`uv sync --reinstall-package groundeval`)", permanent=True)
    return found


def _bindings() -> dict[str, dict[str, list[str]]]:
    from pytest_groundeval.fhir.codes import WRITE_BINDINGS

    return {rtype: {element: list(codes) for element, codes in rules.items()}
            for rtype, rules in WRITE_BINDINGS.items()}


@dataclass
class FhirServer:
    """One server process for this Python process (an xdist worker, or the only process)."""

    write_cap: int = DEFAULT_WRITE_CAP
    #: bytes of request and response bodies a case's log keeps (requests beyond: counted in
    #: ``requests_cut``, not kept; run/fhircase.py makes such a case an error)
    max_log_bytes: int = DEFAULT_LOG_BYTES
    #: the largest request body the server reads: a larger case bundle is refused before sending
    max_body_bytes: int = MAX_BODY_BYTES
    node: str | None = None
    _proc: subprocess.Popen | None = field(default=None, init=False, repr=False)
    _port: int | None = field(default=None, init=False)
    _token: str = field(default="", init=False, repr=False)  # the control token (made at each start)
    _unavailable: ServerUnavailable | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _stderr: Any = field(default=None, init=False, repr=False)
    generation: int = field(default=0, init=False)  # how many times it was started
    _registered: bool = field(default=False, init=False, repr=False)
    _local: threading.local = field(default_factory=threading.local, init=False, repr=False)

    # -- the process --
    @property
    def port(self) -> int | None:
        return self._port

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def ensure(self) -> None:
        """Running and healthy after this, or ServerUnavailable (the same one every time when
        Node or the bundle is the reason)."""
        with self._lock:
            if self._unavailable is not None:
                raise self._unavailable
            if self.running() and self._healthy():
                return
            self._stop_locked()
            try:
                self._start_locked()
            except ServerUnavailable as e:
                if e.permanent:
                    self._unavailable = e
                raise

    def _start_locked(self) -> None:
        node = check_node(self.node)
        self._token = secrets.token_hex(32)  # a new control token for each start
        # its configuration on stdin: nothing secret in its environment or command line
        env = {"PATH": os.environ.get("PATH", os.defpath)}
        config = {"token": self._token, "bindings": _bindings(), "write_cap": self.write_cap,
                  "max_log_bytes": self.max_log_bytes, "max_body_bytes": self.max_body_bytes}
        self._stderr = tempfile.TemporaryFile()
        try:
            self._proc = subprocess.Popen([node, str(SERVER_JS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=self._stderr, env=env, start_new_session=True)
        except OSError as e:
            raise ServerUnavailable(f"the FHIR server could not be started: {e}", permanent=False) from None
        try:
            self._proc.stdin.write(json.dumps(config).encode("utf-8") + b"\n")  # type: ignore[union-attr]
            self._proc.stdin.flush()  # type: ignore[union-attr]
        except OSError:
            pass  # it exited at once: its ready line is missing, its stderr says why
        if not self._registered:
            atexit.register(self.stop)
            self._registered = True
        line = self._first_line()
        try:
            self._port = int(json.loads(line)["port"])
        except (ValueError, KeyError, TypeError):
            why = self._stderr_tail() or line.strip() or "no output"
            self._stop_locked()
            raise ServerUnavailable(f"the FHIR server did not start: {why}", permanent=False) from None
        self.generation += 1

    def _first_line(self) -> str:
        """The server's ready line (``{"port": N}``), or '' when it exits or hangs first."""
        assert self._proc is not None and self._proc.stdout is not None
        got: list[str] = []
        ready = threading.Event()

        def read() -> None:
            got.append(self._proc.stdout.readline().decode("utf-8", "replace"))  # type: ignore[union-attr]
            ready.set()

        threading.Thread(target=read, daemon=True, name="groundeval-fhir-ready").start()
        ready.wait(START_LIMIT_S)
        return got[0] if got else ""

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0)
            lines = [x for x in self._stderr.read().decode("utf-8", "replace").splitlines() if x.strip()]
        except (OSError, ValueError):
            return ""
        return " / ".join(lines[-3:])

    def _healthy(self) -> bool:
        try:
            return bool(self._control("GET", "health").get("ok"))
        except ServerDied:
            return False

    def stop(self) -> None:
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        proc, self._proc, self._port = self._proc, None, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()  # the server exits when its stdin closes
        except OSError:
            pass
        try:
            proc.terminate()
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        except OSError:
            pass
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for stream in (proc.stdout,):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        if self._stderr is not None:
            try:
                self._stderr.close()
            except OSError:
                pass
            self._stderr = None

    # -- HTTP --
    def _control(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """One control call on this thread's kept-alive connection (a new one when the server
        closed it, or a restart changed the port)."""
        import http.client

        port = self._port
        if port is None:
            raise ServerDied("the FHIR server is not running")
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode("utf-8")
        headers = {"x-groundeval-control": self._token, "content-type": "application/json"}
        for attempt in (1, 2):
            conn = getattr(self._local, "conn", None)
            if conn is None or getattr(self._local, "port", None) != port:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                self._local.conn, self._local.port = conn, port
            try:
                conn.request(method, f"/_control/{path}", body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (http.client.HTTPException, OSError) as e:
                conn.close()
                self._local.conn = None
                if attempt == 1 and isinstance(e, (http.client.RemoteDisconnected, ConnectionResetError,
                                                   BrokenPipeError)) and self.running():
                    continue  # a kept-alive connection the server had closed: once more, on a new one
                raise ServerDied(f"the FHIR server did not answer {method} {path}: {type(e).__name__}: {e}") from None
            if resp.status >= 400:
                try:
                    detail = json.loads(raw).get("error")
                except (ValueError, AttributeError):
                    detail = None
                raise CaseRefused(f"the FHIR server refused {method} {path}: {detail or resp.status}")
            try:
                return json.loads(raw)
            except ValueError as e:
                raise ServerDied(f"the FHIR server answered {method} {path} with something not JSON: {e}") from None
        raise AssertionError("unreachable")

    # -- one case --
    def open_case(self, bundle: Any, *, key: str | None = None, clock: str | None = None,
                  write_cap: int | None = None) -> ServerCase:
        """A fresh repository seeded with ``bundle`` (a FHIR Bundle dict, or None for an empty
        one), reached at a base URL holding a token made for this opening alone (256 random
        bits: another case's agent cannot compute it). ``key`` makes the ids the server assigns
        the same run after run; ``clock`` (ISO instant) is when its ``meta.lastUpdated``
        starts. CaseRefused when the server cannot take the bundle: over its body limit (said
        before anything is sent), or not seeded."""
        spec: dict[str, Any] = {"bundle": bundle, "key": key, "clock": clock, "token": secrets.token_hex(32)}
        if write_cap is not None:
            spec["write_cap"] = write_cap
        body = json.dumps(spec).encode("utf-8")
        if len(body) > self.max_body_bytes:
            raise CaseRefused(f"the case's bundle is {len(body):,} bytes as JSON, over the FHIR server's request "
                              f"body limit of {_size(self.max_body_bytes)} ({self.max_body_bytes:,} bytes): "
                              "it cannot be seeded")
        self.ensure()
        got = self._control("POST", "cases", body)
        return ServerCase(id=got["id"], base_url=f"http://127.0.0.1:{self._port}{got['base_path']}",
                          before=got["state"], generation=self.generation)

    def refused(self) -> list[dict[str, Any]]:
        """The requests the server refused for naming no open case, or a control call without
        its token (the last 1000; paths with tokens cut to their first characters); [] when
        it is not running."""
        if not self.running():
            return []
        try:
            return list(self._control("GET", "refused").get("refused") or [])
        except (ServerDied, CaseRefused):
            return []

    def activity(self, case: ServerCase, *, close: bool = False) -> dict[str, Any]:
        """``{requests, requests_cut, writes, state}`` of a case (``close``: and its repository
        dropped, in the same call); ServerDied when the server that held it is gone (died, or
        started again since)."""
        if case.generation != self.generation or not self.running():
            raise ServerDied(self._death())
        try:
            return self._control("POST" if close else "GET", f"cases/{case.id}/" + ("close" if close else "activity"))
        except ServerDied:
            raise ServerDied(self._death()) from None

    def close_case(self, case: ServerCase) -> None:
        if case.generation != self.generation or not self.running():
            return
        try:
            self._control("DELETE", f"cases/{case.id}")
        except (ServerDied, CaseRefused):
            pass

    def _death(self) -> str:
        proc = self._proc
        code = None
        if proc is not None:  # it did not answer: a killed process may not have been reaped yet
            try:
                code = proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
        how = (f"exited with status {code}" if code is not None and code >= 0
               else f"was killed by signal {-code}" if code is not None else "stopped answering")
        tail = self._stderr_tail()
        return f"the FHIR server {how} during this case" + (f" ({tail})" if tail else "")


def _size(n: int) -> str:
    return f"{n / (1 << 20):g} MiB" if n % (1 << 20) == 0 else f"{n:,} bytes"


class CaseRefused(RuntimeError):
    """The server answered a control call with an error (e.g. a bundle it could not seed)."""
