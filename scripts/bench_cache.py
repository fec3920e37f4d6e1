"""Model-call cache: a fully cached re-run of the whole committed suite makes zero model calls,
and its wall time is compared with the offline baseline agent's.

No API key is used: a local fake Anthropic Messages API (http.server on 127.0.0.1, in a
thread) stands in for the model, and the real SDK is pointed at it with
``ANTHROPIC_BASE_URL``. It answers extraction prompts with the right active medications
(computed from the bundle in the prompt) and write prompts with the rule-based baseline's
MedicationStatement, and counts requests. The suite is ``evals/`` over
``fixtures/synthea`` and ``fixtures/write_cases``. Runs:

    (a) --agent=claude --model-cache write  --model-cache-dir D   populates D (N calls)
    (b) --agent=claude --model-cache strict --model-cache-dir D   fake server stopped: any
        call would fail, a miss is an error; must make 0 calls, same cases as (a), no errors
    (c) --agent=baseline                                          offline reference

Goal: (b) makes zero model calls and reproduces every case of (a) with no error; its wall
time is printed next to (c)'s (the ratio is information, not a gate).
Run exit status 1 is fine (some cases fail on their merits); outcomes come from the records.

Usage: uv run python scripts/bench_cache.py [--concurrency 8]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_util import (  # noqa: E402
    ROOT,
    SYNTHEA,
    WRITE_CASES,
    BenchFailure,
    child_env,
    copy_evals,
    expect_cases,
    read_record,
    run_pytest,
    table,
    temp_project,
    usage_counts,
    verdict,
)

sys.path.insert(0, str(ROOT))
from pytest_groundeval.tasks.write_baseline import run_baseline_write  # noqa: E402
from pytest_groundeval.tasks.extraction import active_medications  # noqa: E402

_SUBJECT = re.compile(r"for the patient (\S+?)\.?\s*\n")


def answer(prompt: str) -> str:
    """What the fake model says: the right extraction answer, or the baseline's written resource."""
    if "Bundle:\n" in prompt:
        bundle = json.JSONDecoder().raw_decode(prompt.split("Bundle:\n", 1)[1])[0]
        return json.dumps({"active_medications": active_medications(bundle, "prompt")})
    if "Clinical note:" in prompt:
        note = prompt.split("Clinical note:", 1)[1].strip()
        m = _SUBJECT.search(prompt)
        resource = run_baseline_write(note, m.group(1) if m else "Patient/unknown").get("resource")
        return json.dumps(resource) if resource is not None else "I could not identify the medication."
    return "I don't know this task."


class FakeMessagesAPI:
    """POST /v1/messages on 127.0.0.1, in a daemon thread; counts requests."""

    def __init__(self) -> None:
        self.calls = 0
        self.errors = 0
        lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                with lock:
                    api.calls += 1
                try:
                    if not self.path.split("?", 1)[0].endswith("/v1/messages"):
                        raise ValueError(f"unexpected path {self.path}")
                    req = json.loads(body)
                    content = req["messages"][0]["content"]
                    prompt = content if isinstance(content, str) else "".join(
                        b.get("text", "") for b in content if isinstance(b, dict))
                    text = answer(prompt)
                    payload = {
                        "id": f"msg_bench_{api.calls}", "type": "message", "role": "assistant",
                        "model": req.get("model", "fake"), "content": [{"type": "text", "text": text}],
                        "stop_reason": "end_turn", "stop_sequence": None,
                        "usage": {"input_tokens": max(1, len(prompt) // 4), "output_tokens": max(1, len(text) // 4)},
                    }
                    status, out = 200, json.dumps(payload).encode()
                except Exception as e:  # noqa: BLE001 - reported as a 400 and counted
                    with lock:
                        api.errors += 1
                    status = 400
                    out = json.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                                 "message": str(e)}}).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=int, default=None,
                   help="--concurrency for the claude runs (default: the plugin's, 8 for live agents)")
    p.add_argument("--keep", action="store_true", help="keep the temp project")
    a = p.parse_args(argv)

    with temp_project("groundeval-bench-cache-", keep=a.keep) as proj:
        copy_evals(proj, ("test_extraction.py", "test_write.py"))
        cache = proj / "model-cache"
        suite = [f"--data-dir={SYNTHEA}", f"--write-cases={WRITE_CASES}", "--agent-retries=0"]
        conc = ["--concurrency", str(a.concurrency)] if a.concurrency else []

        server = FakeMessagesAPI()
        port = server.port
        env = child_env(ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}", ANTHROPIC_API_KEY="dummy")
        try:
            rec_a = proj / "record-a.json"
            run_a = run_pytest(proj, [*suite, *conc, "--agent=claude", "--model-cache", "write",
                                      f"--model-cache-dir={cache}", f"--run-record={rec_a}"],
                               label="(a) claude, cache write", env=env, ok=(0, 1))
        finally:
            server.stop()
        calls_a, server_errors = server.calls, server.errors
        record_a = read_record(rec_a)
        n = len(record_a["cases"])
        got_a = expect_cases(record_a, "(a)", n)
        if got_a.get("error") or server_errors:
            raise BenchFailure(f"(a) should populate the cache without errors: outcomes {dict(got_a)}, "
                               f"fake-server errors {server_errors}")

        # (b): the server is stopped; ANTHROPIC_BASE_URL still points at its (closed) port
        rec_b = proj / "record-b.json"
        run_b = run_pytest(proj, [*suite, *conc, "--agent=claude", "--model-cache", "strict",
                                  f"--model-cache-dir={cache}", f"--run-record={rec_b}"],
                           label="(b) claude, cache strict, server stopped", env=env, ok=(0, 1))
        calls_b = server.calls - calls_a  # the server is down: stays 0 by construction
        record_b = read_record(rec_b)
        got_b = expect_cases(record_b, "(b)", n)
        usage_b = usage_counts(record_b)

        rec_c = proj / "record-c.json"
        run_c = run_pytest(proj, [*suite, "--agent=baseline", f"--run-record={rec_c}"],
                           label="(c) baseline", ok=(0, 1))
        got_c = expect_cases(read_record(rec_c), "(c)", n)

    usage_a = usage_counts(record_a)
    same = [(c["task"], c["case_id"], c["outcome"]) for c in sorted(record_a["cases"], key=lambda c: (c["task"], c["case_id"]))] == \
           [(c["task"], c["case_id"], c["outcome"]) for c in sorted(record_b["cases"], key=lambda c: (c["task"], c["case_id"]))]

    def fmt(got) -> str:
        return " ".join(f"{k}={v}" for k, v in sorted(got.items()))

    print(f"suite: {n} cases (evals/ over fixtures/synthea + fixtures/write_cases); fake Messages API on 127.0.0.1:{port}")
    print()
    table(["run", "wall s", "server calls", "model_calls (record)", "cache_hits (record)", "outcomes"], [
        ["(a) claude --model-cache write", f"{run_a.wall:.2f}", calls_a, usage_a.get("model_calls", 0),
         usage_a.get("cache_hits", 0), fmt(got_a)],
        ["(b) claude --model-cache strict, server down", f"{run_b.wall:.2f}", calls_b, usage_b.get("model_calls", 0),
         usage_b.get("cache_hits", 0), fmt(got_b)],
        ["(c) --agent=baseline", f"{run_c.wall:.2f}", "-", "-", "-", fmt(got_c)],
    ])
    print()
    print(f"model calls: (a) {calls_a} (server count), (b) {calls_b} (server stopped; record says "
          f"{usage_b.get('model_calls', 0)} calls, {usage_b.get('cache_hits', 0)} cache hits)")
    print(f"(b) reproduces (a) case by case (ids and outcomes): {same}")
    print(f"wall time, cached re-run (b) / baseline (c): {run_b.wall / run_c.wall:.2f}x "
          f"({run_b.wall:.2f} s vs {run_c.wall:.2f} s)")
    ok = (calls_b == 0 and usage_b.get("model_calls", 0) == 0 and usage_b.get("cache_hits", 0) == n
          and not got_b.get("error") and same)
    print(f"goal: zero model calls, all {n} cases served from the cache, none with error  -> {verdict(ok)}")


if __name__ == "__main__":
    main()
