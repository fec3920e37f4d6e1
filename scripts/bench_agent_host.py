"""What the agent host costs per case: the extraction suite with an instant ``module:Class``
agent (``bench_agents:Instant``, the precomputed right answer) in its agent host (the
default) against the same agent with ``--agent-in-process``, side by side in one run.

Both commands run in one warm project (its ``.groundeval/bundles`` filled by an untimed run
first, so bundle validation, the same for both, is out of the figure), ``--concurrency 1``,
a run record each. Per-case cost = (wall(N) - wall(N0)) / (N - N0), so start-up (the host's
included) cancels. ``--rounds`` rounds, each running the four commands once, the order rotated
each round (so drift and the neighbours' load hit both modes alike); the per-case cost of
each mode from its best walls (the least noisy estimate on a shared machine), and each
round's own ratio (paired) beside it. The CPU time per case (pytest's process and, before it
ends them, every process it started: the agent host's keeper and server) is printed too: on
a loaded machine it shows the work itself, apart from waiting for a CPU. Goal: a case with
the host <= 1.1x the same case in-process (wall); the last line says met or MISSED.

Usage: uv run python scripts/bench_agent_host.py [--cases 800] [--small 100] [--rounds 3]
           [--fixture median|smallest|largest|NAME] [--dev-env] [--keep]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_overhead import check_eval, eval_args  # noqa: E402 - the same eval run as the overhead bench
from _bench_util import (  # noqa: E402
    Config,
    child_env,
    copy_evals,
    fixture_with_meds,
    goal,
    median,
    paired_walls,
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




CPU_PLUGIN = '''import os
import pytest


def _cpu(pid):
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), int(fields[1])


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session):
    """Before the agent host is ended: the CPU seconds of this process and its descendants."""
    me, parents, times = os.getpid(), {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                times[int(entry)], parents[int(entry)] = _cpu(entry)
            except (OSError, IndexError, ValueError):
                continue
    mine = {me}
    for _ in range(8):  # (a few levels: keeper, server, what the agent starts)
        mine |= {pid for pid, parent in parents.items() if parent in mine}
    t = os.times()
    total = t.user + t.system + sum(times[pid] for pid in mine - {me})
    with open(os.environ["BENCH_CPU_OUT"], "w") as fh:
        fh.write(repr(total))
    return (yield)
'''


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
        (proj / "bench_cpu.py").write_text(CPU_PLUGIN)
        configs, cpu = [], {}
        for mode, extra in MODES.items():
            for size in (n0, n):
                label = f"{mode} N={size}"
                record, out = proj / f"record-{mode.replace(' ', '-')}-{size}.json", proj / f"cpu-{mode.replace(' ', '-')}-{size}"
                env = child_env(BENCH_CPU_OUT=str(out), PYTHONPATH=os.pathsep.join(filter(None, [str(proj), os.environ.get("PYTHONPATH")])))
                configs.append(Config(label, proj, ["-p", "bench_cpu", *eval_args(proj, size, record, *extra)], env=env,
                                      check=_checked(check_eval(record, size, label), out, cpu.setdefault(label, []))))
        print(f"fixture {source.name} ({source.stat().st_size:,} bytes), tagged N times; instant module:Class agent, "
              f"--concurrency 1, warm project; {len(configs)} commands x {a.rounds} rounds, order rotated each round:")
        rounds = paired_walls(configs, a.rounds)
    _report(rounds, cpu, n, n0)


def _checked(check, out: Path, into: list[float]):
    def run_check(run) -> None:
        check(run)
        into.append(float(out.read_text()))
    return run_check


def _report(rounds: list[dict[str, float]], cpu: dict[str, list[float]], n: int, n0: int) -> None:
    best = {label: min(r[label] for r in rounds) for label in rounds[0]}
    pcs = {m: per_case(best[f"{m} N={n}"], best[f"{m} N={n0}"], n, n0) for m in MODES}
    cpus = {m: per_case(min(cpu[f"{m} N={n}"]), min(cpu[f"{m} N={n0}"]), n, n0) for m in MODES}
    paired = []
    for r in rounds:
        host, inproc = (per_case(r[f"{m} N={n}"], r[f"{m} N={n0}"], n, n0) for m in MODES)
        paired.append(host / inproc if host > 0 and inproc > 0 else float("nan"))
    print()
    table(["mode", f"best wall s N={n0}", f"best wall s N={n}", "µs/case (wall)", "µs/case (CPU)"],
          [[m, f"{best[f'{m} N={n0}']:.2f}", f"{best[f'{m} N={n}']:.2f}", f"{pcs[m] * 1e6:.0f}", f"{cpus[m] * 1e6:.0f}"]
           for m in MODES])
    print(f"  each round's own ratio (host / in-process, wall): {', '.join(f'{x:.2f}x' for x in paired)} "
          f"(median {median(paired):.2f}x)")
    if min(cpus.values()) > 0:
        print(f"  CPU per case, host / in-process: {cpus['agent host'] / cpus['in-process']:.2f}x "
              f"(+{(cpus['agent host'] - cpus['in-process']) * 1e6:.0f} µs: pytest's process and the host's together)")
    text = (f"a case with its agent in the agent host, {pcs['agent host'] * 1e6:.0f} µs, vs in-process "
            f"(--agent-in-process) {pcs['in-process'] * 1e6:.0f} µs (instant module:Class agent, warm, N={n} vs "
            f"N0={n0}, best walls of {len(rounds)} rotated rounds)")
    if min(pcs.values()) <= 0:  # the machine's noise swamped the difference: no figure
        print(f"goal: {text}: inconclusive (a per-case cost <= 0: rerun on a quieter machine or with more --cases)")
        return
    goal(text, pcs["agent host"] / pcs["in-process"], HOST_GOAL)


if __name__ == "__main__":
    main()
