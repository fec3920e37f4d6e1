"""scripts/bench_fhir_core_validators.py, the reproducer behind FRICTION.md B's upstream issue:
its cached validators give fhir-core's own outcomes (it exits 0 and says so), and its check
catches a cached validator that drops a rule (it exits 1). Run in a child: the script swaps
fhir-core's validator code in its own process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "bench_fhir_core_validators.py"


def _run(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(path), "--reps", "1", "--fixtures", str(REPO / "fixtures" / "synthea")],
                          capture_output=True, text=True, timeout=300)


def test_the_cached_validators_give_fhir_cores_outcomes():
    run = _run(SCRIPT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "identical outcomes (45 validated Bundles dumped, 6 invalid bundles' errors): True" in run.stdout


def test_a_cached_validator_that_drops_a_rule_is_caught(tmp_path):
    text = SCRIPT.read_text()
    rule = "        if is_required and not found:"
    assert rule in text
    broken = tmp_path / "broken.py"
    broken.write_text(text.replace(rule, "        if False:"))
    run = _run(broken)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "identical outcomes" in run.stdout and ": False" in run.stdout
