"""Headless Chromium driven over the DevTools protocol on a pipe (no port, no extra package).

Used by the HTML report's browser tests (``tests/reporting/test_html_report.py``) and by
``scripts/bench_report_search.py``: a page is opened at a given viewport size and JavaScript
is evaluated in it (the page's own script runs under its Content-Security-Policy; what is
evaluated here is the DevTools' own, as in the browser's console), so a test can measure
where an element is, type into the search box and read the result.

``--remote-debugging-pipe``: Chromium reads commands from its fd 3 and writes replies and
events to its fd 4, each a JSON message ended by a NUL byte. Nothing listens on a port, and
the browser process (and its profile folder) is gone when the ``with`` block ends.

    with Chromium() as browser:
        page = browser.open(path, fragment="case=write:x", width=1280, height=900)
        page.evaluate("document.title")
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class ChromiumError(RuntimeError):
    """The browser answered with an error, died, or a page did not become ready."""


class Page:
    def __init__(self, browser: "Chromium", session: str, target: str) -> None:
        self.browser, self.session, self.target = browser, session, target

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.send(method, params, session=self.session)

    def evaluate(self, expression: str, *, await_promise: bool = False) -> Any:
        """The value of ``expression`` in the page (JSON-able values come back as Python)."""
        reply = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                               "awaitPromise": await_promise})
        if "exceptionDetails" in reply:
            details = reply["exceptionDetails"]
            text = (details.get("exception") or {}).get("description") or details.get("text")
            raise ChromiumError(f"evaluating {expression[:80]!r}: {text}")
        return reply["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 120.0) -> Any:
        """Poll ``expression`` until it is truthy (a condition, not a sleep: it returns as soon
        as it holds; ``timeout`` only bounds a page that never gets there)."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise ChromiumError(f"{expression!r} did not hold within {timeout:.0f} s")
            time.sleep(0.02)

    def close(self) -> None:
        self.browser.send("Target.closeTarget", {"targetId": self.target})


class Chromium:
    def __init__(self, executable: str | None = None) -> None:
        exe = executable or CHROMIUM
        if exe is None:
            raise ChromiumError("headless Chromium not found (`chromium` on PATH)")
        self.profile = tempfile.mkdtemp(prefix="groundeval-chromium-")
        # our ends: we write commands to `cmd_w` (its fd 3), read replies from `out_r` (its fd 4)
        cmd_r, self.cmd_w = os.pipe()
        self.out_r, out_w = os.pipe()

        def child_fds() -> None:  # in the child, before exec: the pipe ends on its fds 3 and 4
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (cmd_r, out_w)]  # never clobber one another
            for fd, want in zip(high, (3, 4)):
                os.dup2(fd, want)  # inheritable; every other fd of ours is close-on-exec
                os.close(fd)

        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             "--no-default-browser-check", "--disable-background-timer-throttling",
             "--disable-renderer-backgrounding", "--disable-backgrounding-occluded-windows",
             f"--user-data-dir={self.profile}", "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=False, preexec_fn=child_fds)
        os.close(cmd_r)
        os.close(out_w)
        self._next = 0
        self._buffer = b""
        self.events: list[dict[str, Any]] = []

    # ------------------------------------------------------------ the protocol
    def _read_message(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self.out_r, 1 << 20)
            if not chunk:
                raise ChromiumError(f"Chromium closed its pipe (exit status {self.proc.poll()})")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        data = json.dumps(message).encode("utf-8") + b"\0"
        while data:
            data = data[os.write(self.cmd_w, data):]
        while True:
            reply = self._read_message()
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise ChromiumError(f"{method}: {reply['error']}")
                return reply.get("result") or {}
            if "method" in reply:
                self.events.append(reply)

    def open(self, path: Path | str, fragment: str = "", *, width: int = 1280, height: int = 900,
             ready: str = "document.body && document.body.getAttribute('data-ready') === '1'") -> Page:
        """A new tab showing the file ``path`` (``#fragment``), laid out at ``width`` x ``height``
        CSS pixels, once ``ready`` holds (the report's script ran to its end)."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session, target)
        page.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        page.send("Runtime.enable")
        page.send("Log.enable")  # what the browser itself logs: a blocked resource, a policy violation
        url = Path(path).resolve().as_uri() + (f"#{fragment}" if fragment else "")
        page.send("Page.navigate", {"url": url})
        page.wait_for(f"location.href === {json.dumps(url)} && ({ready})")
        return page

    def console_messages(self) -> list[str]:
        """What pages wrote to the console, uncaught exceptions, and the browser's own errors and
        warnings about them (a policy violation, a blocked load)."""
        out = []
        for ev in self.events:
            if ev.get("method") == "Runtime.consoleAPICalled":
                out.append(" ".join(str(a.get("value", a.get("description"))) for a in ev["params"].get("args", [])))
            elif ev.get("method") == "Runtime.exceptionThrown":
                out.append(str(ev["params"]["exceptionDetails"].get("text")))
            elif ev.get("method") == "Log.entryAdded" and ev["params"]["entry"].get("level") in ("error", "warning"):
                out.append(str(ev["params"]["entry"].get("text")))
        return out

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    self.send("Browser.close")
                except ChromiumError:
                    pass
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        finally:
            for fd in (self.cmd_w, self.out_r):
                try:
                    os.close(fd)
                except OSError:
                    pass
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
