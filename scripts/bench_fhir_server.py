"""groundeval's FHIR server (``pytest_groundeval/fhir/server``): how long it takes to start, and
how long a case's reset + seed takes, against the goals of issue 18.

  start:  from launching the Node process to its first healthy answer (a fresh process each
          time). Goal <= 2 s.
  seed:   one case's fresh repository seeded with a trimmed Synthea bundle (every committed
          fixture under fixtures/synthea, in turn) plus dropping it at the case's end (open +
          activity dump + close: the harness's whole per-case server work). Goal <= 20 ms.

Medians (and p90) over the runs; prints met / missed per goal. Exit status 0 either way
(a benchmark, not a gate), 2 when the server cannot run here (no Node >= 20.19).

Usage: uv run python scripts/bench_fhir_server.py [--starts 5] [--cases 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_groundeval.fhir.server.manager import FhirServer, ServerUnavailable  # noqa: E402

START_GOAL_S = 2.0
SEED_GOAL_S = 0.020


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--cases", type=int, default=200)
    args = parser.parse_args()

    warm = FhirServer()
    try:
        warm.ensure()  # the first start (not timed)
    except ServerUnavailable as e:
        print(f"cannot run: {e.reason}")
        return 2
    warm.stop()

    starts = []
    for _ in range(args.starts):
        server = FhirServer()
        began = time.perf_counter()
        server.ensure()
        starts.append(time.perf_counter() - began)
        server.stop()

    bundles = [json.loads(p.read_text()) for p in sorted((ROOT / "fixtures" / "synthea").glob("*.json"))]
    sizes = [len(b.get("entry", [])) for b in bundles]
    server = FhirServer()
    server.ensure()
    seeds, opens = [], []
    try:
        for i in range(args.cases):
            bundle = bundles[i % len(bundles)]
            began = time.perf_counter()
            case = server.open_case(bundle, key=f"bench:{i}", clock="2026-01-01T00:00:00Z")
            opened = time.perf_counter()
            server.activity(case, close=True)
            seeds.append(time.perf_counter() - began)
            opens.append(opened - began)
    finally:
        server.stop()

    start_med, seed_med = statistics.median(starts), statistics.median(seeds)
    print(f"bundles: {len(bundles)} trimmed Synthea fixtures, {min(sizes)}-{max(sizes)} entries "
          f"(median {statistics.median(sizes):.0f})")
    print(f"{'measure':<34}{'median':>10}{'p90':>10}{'goal':>10}  verdict")
    print(f"{'server start (s)':<34}{start_med:>10.3f}{_pct(starts, 0.9):>10.3f}{START_GOAL_S:>10.3f}  "
          f"{'met' if start_med <= START_GOAL_S else 'MISSED'}")
    print(f"{'reset + seed, open only (ms)':<34}{statistics.median(opens) * 1000:>10.1f}"
          f"{_pct(opens, 0.9) * 1000:>10.1f}{'':>10}  (information)")
    print(f"{'reset + seed + dump + drop (ms)':<34}{seed_med * 1000:>10.1f}{_pct(seeds, 0.9) * 1000:>10.1f}"
          f"{SEED_GOAL_S * 1000:>10.1f}  {'met' if seed_med <= SEED_GOAL_S else 'MISSED'}")
    print(f"ratio to goal: start {start_med / START_GOAL_S:.2f}x, per case {seed_med / SEED_GOAL_S:.2f}x "
          f"(below 1 meets it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
