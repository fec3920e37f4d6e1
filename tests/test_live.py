"""Live end-to-end runs against a real model: only when ANTHROPIC_API_KEY is set."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, ZERO

pytestmark = pytest.mark.skipif(not os.environ.get("ANTHROPIC_API_KEY"), reason="ANTHROPIC_API_KEY not set")


def _run(tmp_path, *args):
    record = tmp_path / "live.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "evals", "-p", "no:cacheprovider",
                           "--run-record", str(record), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert record.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(record.read_text())


def test_claude_extraction_live(tmp_path):
    rec = _run(tmp_path, "-m", "extraction", "--agent=claude", "-k", f"{ZERO} or Clarissa466")
    assert len(rec["cases"]) == 2
    for case in rec["cases"]:
        assert case["outcome"] in ("passed", "failed"), case["error"]
        assert case["usage"]["input_tokens"] > 0 and case["raw_output"]


def test_langgraph_write_live(tmp_path):
    rec = _run(tmp_path, "-m", "write", "--agent=langgraph", "--model", "anthropic:claude-opus-4-8",
               "-k", "tylenol-brand-name")
    (case,) = rec["cases"]
    assert case["outcome"] in ("passed", "failed"), case["error"]
    assert case["transcript"] and case["score"]["dimensions"]
