"""Shared helpers for the plugin's own tests: real fixture bundles copied into a pytester
project, and scripted agents importable as ``agents_under_test:Name``."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

# Import HealthChain / fhir.resources once in this (outer) process. pytester's in-process
# runs drop modules first imported inside them; re-importing half of fhir.resources while
# HealthChain keeps the other half leaves two ``Reference`` classes that isinstance() tells
# apart. Importing here makes every inner run share one copy.
import healthchain.fhir  # noqa: F401,E402
import fhir.resources.R4B.bundle  # noqa: F401,E402
import numpy  # noqa: F401,E402  (numpy refuses to be imported twice in one process)
import langsmith.client  # noqa: F401,E402  (and requests with it: two copies break cookie jars, error classes)
import langsmith.utils  # noqa: F401,E402
import requests  # noqa: F401,E402
# ... and groundeval's own modules that the plugin imports only when eval items are collected:
# first imported inside one in-process run they would be dropped after it, and the next run's
# fresh copies would raise a CaseError that a kept module's ``except CaseError`` does not catch
# (seen running tests/pytest/test_bad_inputs.py alone: "internal error loading ...: CaseError")
import pytest_groundeval.run.runner  # noqa: F401,E402
import pytest_groundeval.pytest.evaluator  # noqa: F401,E402
import pytest_groundeval.tasks.extraction  # noqa: F401,E402
import pytest_groundeval.tasks.reconciliation  # noqa: F401,E402
import pytest_groundeval.tasks.write  # noqa: F401,E402

ROOT = Path(__file__).resolve().parents[1]

# tests/ mirrors the package (tests/store/, tests/pytest/, ...); a test module imports another
# one's agents, cases and fixtures by its module name (``from test_write_suite import
# AGENT_MODULE``), so every folder is on the path, as pytest's prepend mode puts a test's own
# (test module names are unique across the folders for the same reason)
for _folder in sorted(p for p in Path(__file__).resolve().parent.iterdir()
                      if p.is_dir() and not p.name.startswith((".", "_"))):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))
FIXTURES = ROOT / "fixtures"
SYNTHEA = FIXTURES / "synthea"

# real committed fixtures, chosen for what they exercise
ZERO = "Alena861_Alina705_Bayer639_a41e603d-0d7c-c89f-3be7-74117adc6390"  # 0 active codes (seed)
REFS = "Felicitas300_Donette997_Hayes766_fcf99efa-d698-1818-b988-57b1680c789e"  # medicationReference, completed+active
STOPPED_ACTIVE = "Devin_Bailey_17dc1d1b-060d-4069-b7f9-640463bf12a7"  # SMART: same code stopped and active
SMALL_SET = (ZERO, REFS, STOPPED_ACTIVE, "Clarissa466_Feeney44_38f65650-9735-8541-322d-387417329eb2")

EVAL_FILE = '''
import pytest

@pytest.mark.extraction
def test_extraction(case, agent, scorer, evaluate):
    evaluate(case, agent, scorer)
'''

AGENTS = '''
import json
from pytest_groundeval.tasks.extraction import active_medications

def _truth(prompt):
    bundle = json.loads(prompt.split("Bundle:\\n", 1)[1])
    return active_medications(bundle, "prompt")

class Correct:
    name = "correct"
    def run(self, prompt):
        return json.dumps({"active_medications": _truth(prompt)})

class Fenced:
    name = "fenced"
    def run(self, prompt):
        body = json.dumps({"active_medications": _truth(prompt)}, indent=2)
        return "Here is the list.\\n```json\\n" + body + "\\n```\\nLet me know."

class Hallucinating:
    name = "hallucinating"
    def run(self, prompt):
        meds = _truth(prompt) + [{"code": "198440", "display": "Acetaminophen 500 MG Oral Tablet"}]
        return json.dumps({"active_medications": meds})

class Omitting:
    name = "omitting"
    def run(self, prompt):
        return json.dumps({"active_medications": _truth(prompt)[:-1]})

class WrongKey:
    name = "wrong-key"
    def run(self, prompt):
        return json.dumps({"medications": _truth(prompt)})

class NotJson:
    name = "not-json"
    def run(self, prompt):
        return "The patient takes lisinopril and metformin."

class Raising:
    name = "raising"
    def run(self, prompt):
        raise ConnectionError("upstream API unavailable")

def _patient(prompt):
    bundle = json.loads(prompt.split("Bundle:\\n", 1)[1])
    return next(e["resource"]["id"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient")

def _log(event, **kw):
    import os, time
    path = os.environ.get("AGENT_LOG")
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({"event": event, "t": time.time(), **kw}) + "\\n")

HANG_S = float(__import__("os").environ.get("HANG_S", "3600"))  # a hang: far past any timeout a test sets
HOLD_LIMIT = float(__import__("os").environ.get("HOLD_LIMIT", "60"))  # an event, not a margin: only a broken run waits this out (and then its test fails)

def _wait_for(done):
    import time
    deadline = time.monotonic() + HOLD_LIMIT
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)

def _hold(pid):
    """Events for the tests. OVERLAP=N: each call waits until N calls have started (so calls
    that really run at once overlap however slow the machine). HOLD_UNTIL=path: every call but
    HOLD_EXCEPT's waits until that file exists."""
    import os
    if os.environ.get("OVERLAP"):
        def started():
            with open(os.environ["AGENT_LOG"]) as fh:
                return sum('"start"' in line for line in fh) >= int(os.environ["OVERLAP"])
        _wait_for(started)
    if os.environ.get("HOLD_UNTIL") and os.environ.get("HOLD_EXCEPT", "-") not in pid:
        _wait_for(lambda: os.path.exists(os.environ["HOLD_UNTIL"]))

class Sleepy:
    """Right answers after a fixed sleep; logs start/end of every call (AGENT_LOG)."""
    name = "sleepy"
    def run(self, prompt):
        import os, time
        pid = _patient(prompt)
        _log("start", patient=pid)
        if os.environ.get("KILL_ON") and os.environ["KILL_ON"] in pid:
            import signal
            os.kill(os.getpid(), signal.SIGKILL)
        _hold(pid)
        slow = os.environ.get("SLOW_ON") and os.environ["SLOW_ON"] in pid
        time.sleep(HANG_S if slow else float(os.environ.get("SLEEP", "0.3")))
        _log("end", patient=pid)
        answer = _truth(prompt)
        if os.environ.get("HALLUCINATE"):
            answer = answer + [{"code": "198440", "display": "Acetaminophen 500 MG Oral Tablet"}]
        return json.dumps({"active_medications": answer})

class _HTTPError(Exception):
    def __init__(self, status, headers=None):
        super().__init__(f"HTTP {status}")
        self.status_code = status
        class R: pass
        self.response = R()
        self.response.headers = headers or {}
        self.response.status_code = status

class RateLimitedOnce:
    """429 with retry-after on the first call for each patient, then the right answer."""
    name = "rate-limited-once"
    def __init__(self):
        self.seen = set()
    def run(self, prompt):
        pid = _patient(prompt)
        _log("call", patient=pid)
        if pid not in self.seen:
            self.seen.add(pid)
            raise _HTTPError(429, {"retry-after": "0.05"})
        return json.dumps({"active_medications": _truth(prompt)})

class BadRequest:
    name = "bad-request"
    def run(self, prompt):
        _log("call", patient=_patient(prompt))
        raise _HTTPError(400)

class Hangs:
    """Never answers within any timeout a test sets (HANG_S, an hour by default: a broken
    timeout hangs its test instead of passing it; the cut call's daemon thread is abandoned)."""
    name = "hangs"
    def run(self, prompt):
        import time
        time.sleep(HANG_S)
        return "{}"

class WithUsage:
    name = "with-usage"
    def run(self, prompt):
        return {"text": json.dumps({"active_medications": _truth(prompt)}),
                "usage": {"input_tokens": len(prompt) // 4, "output_tokens": 7}}
'''


@pytest.fixture
def evalproject(pytester: pytest.Pytester):
    """A pytester project with an extraction eval file, scripted agents, and a data dir
    holding copies of real committed fixtures."""
    pytester.makepyfile(test_evals=EVAL_FILE)
    pytester.makepyfile(agents_under_test=AGENTS)
    data = pytester.mkdir("data")
    for stem in SMALL_SET:
        shutil.copy(SYNTHEA / f"{stem}.json", data / f"{stem}.json")
    return pytester


def read_record(pytester: pytest.Pytester, name: str = "record.json") -> dict:
    import json

    return json.loads((pytester.path / name).read_text())


# What every pytester run (in-process or subprocess) leaves out. pytest-retry: see below. The
# other three are the plugins the docs advise leaving out (langsmith's and anyio's, which
# groundeval does not use) and hypothesis's (no inner run has a hypothesis test): pytester's
# projects have no pyproject.toml, so without this each inner run would load them again, and
# in-process runs re-import what they import (pytester drops modules first imported inside a
# run): ~1.5 s of CPU per inner run. Tests that need real plugin auto-loading clear
# PYTEST_ADDOPTS themselves (tests/pytest/test_plugin_clash.py, tests/pytest/test_reruns.py).
INNER_ADDOPTS = "-p no:pytest-retry -p no:langsmith_plugin -p no:anyio -p no:hypothesispytest"


@pytest.fixture(autouse=True)
def _inner_runs_without_pytest_retry(request: pytest.FixtureRequest) -> None:
    """pytest-retry (installed to prove groundeval's options do not clash with it) cannot run
    twice in one process: its second in-process session fails in pytest_configure
    (``config.getoption('filtered_exceptions')``), so pytester's inline runs leave it out
    (and the plugins of ``INNER_ADDOPTS``, for speed). tests/pytest/test_plugin_clash.py runs them
    for real, in fresh processes (see FRICTION.md)."""
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")  # pytester clears PYTEST_ADDOPTS when it starts
        request.getfixturevalue("monkeypatch").setenv("PYTEST_ADDOPTS", INNER_ADDOPTS)
