"""The committed evals, run the way the README says, with the offline baseline agent."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT, SYNTHEA

from pytest_groundeval.store.record import validate_record


def test_pytest_evals_extraction_baseline_is_perfect_on_the_committed_fixtures(tmp_path):
    record = tmp_path / "record.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "evals", "-m", "extraction", "-q", "-p", "no:cacheprovider",
         "--run-record", str(record), "--threshold", "extraction.f1=1.0", "--threshold", "extraction.exact_match=1.0"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    rec = json.loads(record.read_text())
    assert validate_record(rec) == []
    n = len(list(SYNTHEA.glob("*.json")))
    assert n >= 40
    s = rec["summary"]["extraction"]
    assert (s["n_cases"], s["n_passed"], s["micro_f1"]) == (n, n, 1.0)
    assert rec["gate"]["passed"] is True
