"""The base of the tests' scripted HTTP peers (OpenAI- and Anthropic-compatible model servers,
judge servers): a quiet handler that answers JSON."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


class JSONHandler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, body: Any, status: int = 200) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up on this request
            pass


class Loopback:
    """``with Loopback(handler) as server:`` a ``ThreadingHTTPServer`` on 127.0.0.1 serving on a
    thread until the block ends; ``url`` is its base URL (with ``base_path``)."""

    base_path = ""

    def __init__(self, handler: type) -> None:
        from http.server import ThreadingHTTPServer
        import threading

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{self.base_path}"

    def __enter__(self) -> Any:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()
