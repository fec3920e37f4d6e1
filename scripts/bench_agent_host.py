"""What the agent host costs per case: the extraction suite with an instant ``module:Class``
agent (``bench_agents:Instant``, the precomputed right answer) in its agent host (the
default) against the same agent with ``--agent-in-process``, side by side in one run.

Both commands run in one warm project (its ``.groundeval/bundles`` filled by an untimed run
first, so bundle validation, the same for both, is out of the figure), ``--concurrency 1``,
a run record each. Per-case cost = (wall(N) - wall(N0)) / (N - N0), so start-up (the host's
included) cancels; ``--rounds`` paired rounds, the order rotated, the median of the per-round
ratios printed. Goal: a case with the host <= 1.1x the same case in-process.

Usage: uv run python scripts/bench_agent_host.py [--cases 600] [--small 100] [--rounds 3]
           [--fixture median|smallest|largest|NAME] [--dev-env] [--keep]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_util import (  # noqa: E402
    Config,
    copy_evals,
    expect_cases,
    fixture_with_meds,
    goal,
    median,
    paired_walls,
    per_case,
    read_record,
    run_pytest,
    table,
    tagged_bundles,
    temp_project,
    use_runtime_env,
    write_agents,
)

HOST_GOAL = 1.1
MODES = {"agent host": (), "in-process": ("--agent-in-process",)}


def eval_args(proj: Path, n: int, record: Path, *extra: str) -> list[str]:
    return ["test_extraction.py", f"--data-dir={proj / f'data-{n}'}", "--agent=bench_agents:Instant",
            "--concurrency=1", f"--run-record={record}", *extra]


def check_eval(record: Path, n: int, label: str, hosted: bool):
    def check(run) -> None:  # (run: unused)
        rec = read_record(record)
        expect_cases(rec, label, n, passed=True)
        agent = rec.get("agent") or ""
        record.unlink()
        record.with_suffix(".jsonl").unlink(missing_ok=True)
    return check


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=600, help="suite size N (default 600)")
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
            check_eval(record, size, f"prime N={size}", True)(None)
        configs = []
        for mode, extra in MODES.items():
            for size in (n0, n):
                record = proj / f"record-{mode.replace(' ', '-')}-{size}.json"
                configs.append(Config(f"{mode} N={size}", proj, eval_args(proj, size, record, *extra),
                                      check=check_eval(record, size, f"{mode} N={size}", not extra)))
        print(f"fixture {source.name} ({source.stat().st_size:,} bytes), tagged N times; instant module:Class agent, "
              f"--concurrency 1, warm project; {len(configs)} commands x {a.rounds} rounds, paired rotations:")
        rounds = paired_walls(configs, a.rounds)
    pcs = {m: [per_case(w[f"{m} N={n}"], w[f"{m} N={n0}"], n, n0) for w in rounds] for m in MODES}
    print()
    print("start-up (N0, median wall): " + ", ".join(
        f"{m} {median([w[f'{m} N={n0}'] for w in rounds]):.2f} s" for m in MODES))
    table(["mode", f"median wall s N={n}", "µs/case (median)", "per round µs/case"],
          [[m, f"{median([w[f'{m} N={n}'] for w in rounds]):.2f}", f"{median(pcs[m]) * 1e6:.0f}",
            " ".join(f"{x * 1e6:.0f}" for x in pcs[m])] for m in MODES])
    ratio = median([h / i for h, i in zip(pcs["agent host"], pcs["in-process"])])
    goal(f"a case with its agent in the agent host, {median(pcs['agent host']) * 1e6:.0f} µs, vs in-process "
         f"(--agent-in-process) {median(pcs['in-process']) * 1e6:.0f} µs (instant module:Class agent, warm, "
         f"N={n} vs N0={n0}, median of {a.rounds} paired rounds)", ratio, HOST_GOAL)


if __name__ == "__main__":
    main()
