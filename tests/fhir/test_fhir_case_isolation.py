"""Each case's FHIR server repository is its own, against an agent of the same user (issue 29,
item 2). The real server process, cases opened as the harness opens them
(``run/fhircase.open_case``), and an agent-like process of another case that reads every
process's environment and command line it can, the server's own folder, the project's cache
and its own environment, then tries every secret-looking string it found: as the server's
control token, as another case's token, and as the key the old per-install secret derived a
case's URL from (HMAC of the case's public key). It reaches no other case: every read and
write is refused (401/403/404), nothing lands in the other cases' logs or state, and the
server logs what it refused. Its own case works throughout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_fhir_server import needs_node

from pytest_groundeval.fhir.client import FhirClient
from pytest_groundeval.fhir.server.manager import SERVER_JS, FhirServer
from pytest_groundeval.run import fhircase
from pytest_groundeval.tasks.orders import OrdersTask
from pytest_groundeval.tasks.resources import data_path

pytestmark = needs_node

ROOT = Path(__file__).resolve().parents[2]
TASK = OrdersTask(data_path("orders"))
REFS = sorted(TASK.discover(), key=lambda r: r.case_id)

# The other case's agent: reads all it can, then tries each find (stdin: its own base URL, the
# other cases' public keys and patients, the folders to read; stdout: what it read and got).
ATTACK = r'''
import hashlib, hmac, json, os, re, sys, urllib.error, urllib.request
job = json.load(sys.stdin)
own, origin = job["own"], job["own"].split("/case/")[0]
HEX = re.compile(r"[0-9a-fA-F]{16,}")
URL = re.compile(r"http://127\.0\.0\.1:\d+/case/[^/\s\"']+/fhir/R4")
texts, read = [], {"environ": [], "cmdline": [], "files": 0}
for pid in (p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
    for part in ("environ", "cmdline"):
        try:
            texts.append(open(f"/proc/{pid}/{part}", "rb").read().decode("latin-1").replace("\0", "\n"))
            read[part].append(int(pid))
        except OSError:
            pass
texts.append("\n".join(f"{k}={v}" for k, v in os.environ.items()))
for top in job["dirs"]:
    for folder, _, names in os.walk(top):
        for name in names:
            path = os.path.join(folder, name)
            try:
                if os.path.isfile(path) and not os.path.islink(path) and os.path.getsize(path) <= 1 << 20:
                    texts.append(open(path, "rb").read().decode("latin-1"))
                    read["files"] += 1
            except OSError:
                pass
found = sorted({m for t in texts for m in HEX.findall(t)})
urls = sorted({m for t in texts for m in URL.findall(t) if m.startswith(origin + "/")} - {own})


def call(url, method="GET", body=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"content-type": "application/fhir+json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


got, breaches = {}, []
def attempt(what, url, method="GET", body=None, headers=None):
    status = call(url, method, body, headers)
    got[str(status)] = got.get(str(status), 0) + 1
    if status < 400:
        breaches.append(f"{what}: {method} {url} -> {status}")

for victim in job["victims"]:
    key, patient = victim["key"], victim["patient"]
    order = {"resourceType": "ServiceRequest", "status": "active", "intent": "order",
             "subject": {"reference": patient}, "code": {"text": "from another case"}}
    bases = [f"{origin}/case/{c}/fhir/R4" for c in found]  # a found string as a case's token
    bases += [f"{origin}/case/{hmac.new(c.encode(), key.encode(), hashlib.sha256).hexdigest()[:24]}/fhir/R4"
              for c in found]  # the old URL id: HMAC(per-install secret, public key)
    bases += [f"{origin}/case/{hashlib.sha256(key.encode()).hexdigest()[:n]}/fhir/R4" for n in (24, 64)]
    bases += urls + [f"{origin}/case//fhir/R4", f"{origin}/fhir/R4", f"{origin}/case/{key}/fhir/R4"]
    for base in bases:
        attempt("read", f"{base}/{patient}")
        attempt("write", f"{base}/ServiceRequest", "POST", order)
for c in found:  # a found string as the control token: the harness's calls
    attempt("control", f"{origin}/_control/health", headers={"x-groundeval-control": c})
    attempt("control", f"{origin}/_control/cases", "POST", {"bundle": None, "token": "0" * 64},
            headers={"x-groundeval-control": c})
attempt("control", f"{origin}/_control/health")
own_status = call(f"{own}/{job['own_patient']}")
print(json.dumps({"read": read, "found": len(found), "urls": urls, "got": got, "breaches": breaches,
                  "own": own_status}))
'''


SERVER_DIR = SERVER_JS.parent  # the bundle and its sources: nothing is installed or written at run time


@pytest.fixture
def server():
    s = FhirServer()
    yield s
    s.stop()


def opened(server, ref):
    case, handle, error = fhircase.open_case(server, TASK, TASK.load(ref))
    assert error is None, error
    return case, handle


def attack(own_case, victims, dirs) -> dict:
    job = {"own": own_case.inputs["fhir_base_url"], "own_patient": f"Patient/{own_case.inputs['patient_id']}",
           "victims": [{"key": f"orders:{c.ref.case_id}", "patient": f"Patient/{c.inputs['patient_id']}"}
                       for c in victims],
           "dirs": [str(d) for d in dirs]}
    proc = subprocess.run([sys.executable, "-c", ATTACK], input=json.dumps(job), capture_output=True, text=True,
                          timeout=600, env=dict(os.environ))  # an agent gets the harness's environment
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_an_agent_that_reads_proc_the_caches_and_its_environment_reaches_no_other_case(server):
    victims = [opened(server, ref) for ref in REFS[:3]]
    mine, my_handle = opened(server, REFS[3])
    dirs = [SERVER_DIR, ROOT / ".groundeval"]  # the server's own folder, the project's cache
    got = attack(mine, [c for c, _ in victims], dirs)
    print(json.dumps({k: got[k] for k in ("found", "got")}), {k: len(v) if isinstance(v, list) else v
                                                              for k, v in got["read"].items()})
    assert server.pid in got["read"]["environ"] and server.pid in got["read"]["cmdline"]  # it read the server's
    assert os.getpid() in got["read"]["environ"]  # ... and the harness's
    assert got["read"]["files"] > 0
    assert got["breaches"] == [], got["breaches"][:5]
    assert set(got["got"]) <= {"401", "403", "404"} and sum(got["got"].values()) >= 2 * 3 * 5, got["got"]
    assert got["urls"] == []  # no other case's URL anywhere it can read
    assert got["own"] == 200  # its own case answers it
    for _, op in victims:  # nothing reached the other cases: not their logs, not their state
        activity = server.activity(op.handle)
        assert activity["requests"] == [] and activity["state"] == op.handle.before
    refused = server.refused()
    assert len(refused) >= min(1000, sum(got["got"].values()) - 1)  # every refusal logged (the last 1000 kept)
    tokens = [op.handle.base_url.split("/case/")[1].split("/")[0] for _, op in victims + [(mine, my_handle)]]
    assert not any(t in json.dumps(refused) for t in tokens)  # the log names no case's token
    assert {r["status"] for r in refused} <= {401, 403, 404} and all(r["reason"] for r in refused)
    # the honest case works end to end after all that: its own reads and writes, logged on it
    client = FhirClient(mine.inputs["fhir_base_url"])
    made = client.create({"resourceType": "ServiceRequest", "status": "active", "intent": "order",
                          "code": {"coding": [{"system": "http://loinc.org", "code": "4548-4"}]},
                          "subject": {"reference": f"Patient/{mine.inputs['patient_id']}"}})
    assert made.get("id"), made
    _, activity, error = fhircase.close_case(my_handle, mine)
    assert error is None and [c.kind for c in activity.changes] == ["created"]
    assert [(r.method, r.status) for r in activity.requests] == [("GET", 200), ("POST", 201)]
    for _, op in victims:
        server.close_case(op.handle)


def test_no_secret_reaches_the_servers_environment_command_line_or_a_file(server):
    before = {p: p.stat().st_mtime_ns for p in SERVER_DIR.rglob("*")}
    case, op = opened(server, REFS[0])
    token = case.inputs["fhir_base_url"].split("/case/")[1].split("/")[0]
    assert len(token) == 64 and int(token, 16) >= 0  # 256 bits, hex
    proc = Path(f"/proc/{server.pid}")
    environ = (proc / "environ").read_bytes().decode("latin-1").split("\0")
    cmdline = (proc / "cmdline").read_bytes().decode("latin-1")
    for secret in (server._token, token):
        assert secret not in "\0".join(environ) and secret not in cmdline
    assert sorted(e.split("=", 1)[0] for e in environ if e) == ["PATH"]  # nothing else given
    assert {p: p.stat().st_mtime_ns for p in SERVER_DIR.rglob("*")} == before  # the server wrote no file
    server.close_case(op.handle)


def test_each_opening_gets_a_fresh_token_and_a_closed_cases_token_is_dead(server):
    ref = REFS[0]
    first, h1 = opened(server, ref)
    second, h2 = opened(server, ref)  # the same case opened again (a repeat, a resume)
    a, b = first.inputs["fhir_base_url"], second.inputs["fhir_base_url"]
    assert a != b and a.split("/case/")[0] == b.split("/case/")[0]
    pid = f"Patient/{first.inputs['patient_id']}"
    assert FhirClient(a).read(*pid.split("/"))["id"] == first.inputs["patient_id"]
    fhircase.close_case(h1, first)
    dead = FhirClient(a).read(*pid.split("/"))
    assert dead["status"] == 404 and "no such case" in dead["error"]
    assert FhirClient(b).read(*pid.split("/"))["id"] == first.inputs["patient_id"]  # the other opening holds
    fhircase.close_case(h2, second)
