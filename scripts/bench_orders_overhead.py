"""The orders suite's per-case cost against the extraction suite's, side by side (issue 18
item 6): both suites run with the offline baseline in one session each, ``--runs`` times,
alternating; per suite the session's wall time per case and the median of the record's
per-case ``duration_s`` (load, agent, score; for orders also the case's repository: seed,
the baseline's FHIR requests, dump and drop), and their ratio. A benchmark, not a gate:
exit 0 either way (2 when the orders cases could not run: no FHIR server here).

Usage: uv run python scripts/bench_orders_overhead.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def session(marker: str, record: Path) -> tuple[float, list[float], int]:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "evals", "-m", marker, "-q", "-p", "no:cacheprovider",
                    "-p", "no:randomly", "--run-record", str(record)], cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    rec = json.loads(record.read_text())
    cases = [c for c in rec["cases"] if c["task"] == marker]
    passed = sum(c["outcome"] == "passed" for c in cases)
    return wall, [c["duration_s"] for c in cases if c.get("duration_s") is not None], passed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    figures: dict[str, dict[str, list[float]]] = {m: {"wall": [], "case": []} for m in ("extraction", "orders")}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            for marker in ("extraction", "orders"):
                wall, durations, passed = session(marker, Path(tmp) / f"{marker}-{i}.json")
                if not durations or passed == 0:
                    print(f"{marker}: no case ran ({passed} passed): is the FHIR server available here?")
                    return 2
                figures[marker]["wall"].append(wall / len(durations))
                figures[marker]["case"].append(statistics.median(durations))
    ext, ords = figures["extraction"], figures["orders"]
    print(f"{'per case (median of ' + str(args.runs) + ' sessions)':40s} {'extraction':>12s} {'orders':>12s} {'ratio':>8s}")
    for key, label in (("wall", "session wall time / cases"), ("case", "record duration_s (median)")):
        e, o = statistics.median(ext[key]) * 1000, statistics.median(ords[key]) * 1000
        print(f"{label:40s} {e:10.1f}ms {o:10.1f}ms {o / e:7.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
