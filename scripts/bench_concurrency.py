"""Concurrency: in-process ``--concurrency`` against pytest-xdist, on a latency-bound agent.

200 extraction cases (one small committed fixture copied under 200 names); the agent
sleeps a fixed 0.25 s and then returns the right answer (ground truth computed from the
bundle in the prompt). Three runs, side by side in one invocation:

    serial         --concurrency 1
    -n 2           --concurrency 1   (two xdist workers, each serial)
    concurrency 32 --concurrency 32  (one process, 32 calls in flight)

For each: wall time, the ideal ``cases x latency / concurrency`` (2 for ``-n 2``), the ratio
to the ideal, and to ideal + pytest start-up (``--collect-only`` on the same project,
measured separately). Every run's record must hold all cases, passed.

Goals: ``--concurrency 32`` within 1.25x of (ideal + start-up), and >= 10x faster than ``-n 2``.

Usage: uv run python scripts/bench_concurrency.py [--cases 200] [--latency 0.25] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_util import (  # noqa: E402
    child_env,
    copy_bundles,
    copy_evals,
    expect_cases,
    read_record,
    run_pytest,
    smallest_fixture_with_meds,
    startup_time,
    table,
    temp_project,
    verdict,
)

AGENT_MODULE = '''
"""A latency-bound agent: sleeps BENCH_LATENCY seconds, then answers right."""
import json
import os
import time

from pytest_groundeval.tasks.extraction import active_medications


class Sleepy:
    name = "sleepy"

    def run(self, prompt):
        time.sleep(float(os.environ["BENCH_LATENCY"]))
        bundle = json.loads(prompt.split("Bundle:\\n", 1)[1])
        return json.dumps({"active_medications": active_medications(bundle, "prompt")})
'''


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=200, help="extraction cases (default 200)")
    p.add_argument("--latency", type=float, default=0.25, help="agent sleep per call, seconds (default 0.25)")
    p.add_argument("--concurrency", type=int, default=32, help="in-process concurrency to compare (default 32)")
    p.add_argument("--workers", type=int, default=2, help="xdist workers for the -n run (default 2)")
    p.add_argument("--keep", action="store_true", help="keep the temp project")
    a = p.parse_args(argv)

    with temp_project("groundeval-bench-conc-", keep=a.keep) as proj:
        copy_evals(proj)
        (proj / "bench_agents.py").write_text(AGENT_MODULE)
        source = smallest_fixture_with_meds()
        copy_bundles(proj / "data", source, a.cases)
        env = child_env(BENCH_LATENCY=str(a.latency))
        common = [f"--data-dir={proj / 'data'}", "--agent=bench_agents:Sleepy"]
        print(f"{a.cases} extraction cases (copies of {source.name}, {source.stat().st_size:,} bytes), "
              f"agent latency {a.latency} s")

        start_1 = startup_time(proj, common, env=env)
        start_n = startup_time(proj, [*common, "-n", str(a.workers)], env=env)

        plan = [
            ("serial (--concurrency 1)", ["--concurrency", "1"], 1, start_1),
            (f"-n {a.workers} (--concurrency 1)", ["-n", str(a.workers), "--concurrency", "1"], a.workers, start_n),
            (f"--concurrency {a.concurrency}", ["--concurrency", str(a.concurrency)], a.concurrency, start_1),
        ]
        rows, walls = [], {}
        for label, extra, conc, start in plan:
            record_path = proj / f"record-{len(rows)}.json"
            run = run_pytest(proj, [*common, *extra, f"--run-record={record_path}"], label=label, env=env)
            expect_cases(read_record(record_path), label, a.cases, passed=True)
            ideal = a.cases * a.latency / conc
            walls[label] = (run.wall, start)
            rows.append([label, f"{run.wall:.2f}", f"{ideal:.2f}", f"{start:.2f}", f"{run.wall / ideal:.2f}x",
                         f"{run.wall / (ideal + start):.2f}x"])

    print()
    table(["run", "wall s", "ideal s", "start-up s", "wall/ideal", "wall/(ideal+start-up)"], rows)
    (xd_wall, xd_start), (c_wall, c_start) = walls[plan[1][0]], walls[plan[2][0]]
    c_ideal = a.cases * a.latency / a.concurrency
    within = c_wall / (c_ideal + c_start)
    speedup = xd_wall / c_wall
    speedup_net = (xd_wall - xd_start) / max(c_wall - c_start, 1e-9)
    print()
    print(f"pytest start-up (best of 3 --collect-only): {start_1:.2f} s serial, {start_n:.2f} s with -n {a.workers}")
    print(f"--concurrency {a.concurrency} vs ideal + start-up: {within:.2f}x (goal <= 1.25x)  -> {verdict(within <= 1.25)}")
    waves = math.ceil(a.cases / a.concurrency) * a.latency  # no call can be split across slots
    print(f"  (whole-wave floor: ceil({a.cases}/{a.concurrency}) x {a.latency:g} s = {waves:.2f} s; "
          f"wall vs floor + start-up: {c_wall / (waves + c_start):.2f}x)")
    print(f"--concurrency {a.concurrency} speed-up over -n {a.workers}: {speedup:.1f}x wall "
          f"({speedup_net:.1f}x with each run's start-up subtracted) (goal >= 10x)  -> {verdict(speedup >= 10)}")


if __name__ == "__main__":
    main()
