"""What the agent host costs per case: the extraction suite with an instant ``module:Class``
agent (``bench_agents:Instant``, the precomputed right answer) in its agent host (the
default) against the same agent with ``--agent-in-process``, side by side in one run.

Both commands run in one warm project (its ``.groundeval/bundles`` filled by an untimed run
first, so bundle validation, the same for both, is out of the figure), ``--concurrency 1``,
a run record each. Per-case cost = (wall(N) - wall(N0)) / (N - N0), so start-up (the host's
included) cancels; ``--rounds`` interleaved rounds, the best wall of each command kept (the
least noisy estimate on a shared machine). Goal: a case with the host <= 1.1x the same case
in-process.

Usage: uv run python scripts/bench_agent_host.py [--cases 800] [--small 100] [--rounds 3]
           [--fixture median|smallest|largest|NAME] [--dev-env] [--keep]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_overhead import check_eval, eval_args  # noqa: E402 - the same eval run as the overhead bench
from _bench_util import (  # noqa: E402
    Config,
    copy_evals,
    fixture_with_meds,
    goal,
    best_walls,
    per_case,
    run_pytest,
    table,
    tagged_bundles,
    temp_project,
    use_runtime_env,
    write_agents,
)

HOST_GOAL = 1.1
MODES = {"agent host": (), "in-process": ("--agent-in-process",)}




def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=800, help="suite size N (default 800)")
    p.add_argument("--small", type=int, default=100, help="the small size N0 whose wall is subtracted (default 100)")
    p.add_argument("--rounds", type=int, default=3, help="paired rounds, order rotated; medians (default 3)")
    p.add_argument("--fixture", default="median", help="fixture to tag: median (default), smallest, largest, or a name")
    p.add_argument("--dev-env", action="store_true", help="run the children in this interpreter's environment")
    p.add_argument("--keep", action="store_true", help="keep the temp project")
    a = p.parse_args(argv)
    n, n0 = a.cases, a.small
    if n0 < 1 or n <= n0 or a.rounds < 1:
        p.error("--cases must be larger than --small >= 1, and --rounds >= 1")
    use_runtime_env(a.dev_env)
    source = fixture_with_meds(a.fixture)
    with temp_project("bench-agent-host-", keep=a.keep) as proj:
        copy_evals(proj)
        write_agents(proj, source)
        for size in (n0, n):
            tagged_bundles(proj / f"data-{size}", source, size)
            record = proj / f"prime-{size}.json"  # untimed: the bundle verdicts stored (warm)
            run_pytest(proj, eval_args(proj, size, record), label=f"prime N={size}")
            check_eval(record, size, f"prime N={size}")(None)
        configs = []
        for mode, extra in MODES.items():
            for size in (n0, n):
                record = proj / f"record-{mode.replace(' ', '-')}-{size}.json"
                configs.append(Config(f"{mode} N={size}", proj, eval_args(proj, size, record, *extra),
                                      check=check_eval(record, size, f"{mode} N={size}")))
        print(f"fixture {source.name} ({source.stat().st_size:,} bytes), tagged N times; instant module:Class agent, "
              f"--concurrency 1, warm project; {len(configs)} commands x {a.rounds} rounds, interleaved:")
        best = best_walls(configs, a.rounds)
    pcs = {m: per_case(best[f"{m} N={n}"], best[f"{m} N={n0}"], n, n0) for m in MODES}
    print()
    table(["mode", f"best wall s N={n0}", f"best wall s N={n}", "µs/case"],
          [[m, f"{best[f'{m} N={n0}']:.2f}", f"{best[f'{m} N={n}']:.2f}", f"{pcs[m] * 1e6:.0f}"] for m in MODES])
    text = (f"a case with its agent in the agent host, {pcs['agent host'] * 1e6:.0f} µs, vs in-process "
            f"(--agent-in-process) {pcs['in-process'] * 1e6:.0f} µs (instant module:Class agent, warm, N={n} vs "
            f"N0={n0}, best of {a.rounds} interleaved rounds)")
    if min(pcs.values()) <= 0:  # the machine's noise swamped the difference: no figure
        print(f"goal: {text}: inconclusive (a per-case cost <= 0: rerun on a quieter machine or with more --cases)")
        return
    goal(text, pcs["agent host"] / pcs["in-process"], HOST_GOAL)


if __name__ == "__main__":
    main()
