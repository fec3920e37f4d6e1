"""Concurrency, measured inside pytest, side by side in one run (ratios, not time limits).

Every run is a fresh ``python -m pytest`` of the extraction suite (a copy of
``evals/test_extraction.py``, ``-q -p no:cacheprovider``, the project's addopts, a run record
in the temp project) in the runtime environment (``uv sync --no-dev`` into ``.venv-runtime``;
``--dev-env``: this interpreter's), over N distinct bundles (one committed fixture tagged with
its index: N content hashes); every record must hold all cases, passed. Commands that are
compared run ``--repeat`` paired rounds (every command once per round, the order rotated)
and each one's median wall is kept (for (1): the median of the per-round ratios). Every timed
run finds its bundles' verdicts on disk (an untimed run of each data dir first), so none of
them is the one that validates them.

1. No slowdown from the prefetcher for instant agents. An agent that answers right at once
   (``bench_agents:Instant``), N cases at ``--concurrency 32`` vs ``--concurrency 1``;
   per-case cost = (wall(N) - wall(N0)) / (N - N0) so start-up cancels.
   Goal: per case, concurrency 32 <= 1.05x concurrency 1.
2. ``--concurrency 32`` near the ideal. An agent that sleeps ``--latency`` s per call and then
   answers right (``bench_agents:Sleepy``), M cases. Ideal = start-up + ceil(M/32) x latency
   (no call can be split across slots). Start-up = the wall of the very same command with
   ``-k case-00000`` (1 of the M items selected: the same interpreter, imports, plugin set-up,
   collection of all M items, agent construction, thread pool and record writing) minus that
   one call's latency.  Goal: measured <= 1.1x ideal, in three states, each against its own
   start-up: warm (the bundles' verdicts on disk from an untimed run), a fresh machine's run of
   the bundled suites (``.groundeval/`` emptied before every run, every verdict in a shipped
   file: ``-p bench_shipped``; the run must validate nothing), and cold user data
   (``.groundeval/`` emptied, nothing shipped: every bundle validated, ahead of the items).
   Beside it, inspect_ai on the same files and prompts (its own clean environment,
   ``.venv-inspect``: ``uv venv`` + the locked ``inspect-ai`` alone):
   a solver that sleeps the same latency (``asyncio.sleep``), ``max_samples`` = the same
   slots; its measured / ideal and groundeval's wall / its wall (informational).
   Also (kept from the earlier benchmark): the same M cases under ``-n 2`` at
   ``--concurrency 1``, and the speed-up of ``--concurrency 32`` over it, start-up subtracted
   from each.  Goal: >= 10x.
3. The start-up of ``-n 2`` with the workers really started (xdist switches itself off
   under ``--collect-only``, so real items run): a tiny instant suite with ``-n 2`` vs
   without; the difference is what ``-n 2`` adds (informational, no goal set).

Usage: uv run python scripts/bench_concurrency.py [--cases 2000] [--n0 100] [--sleep-cases 200]
           [--latency 0.25] [--concurrency 32] [--workers 2] [--tiny 4] [--repeat 5] [--no-xdist-speedup]
"""

from __future__ import annotations

import argparse
import math
import re
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_util import (  # noqa: E402
    Config,
    inspect_python,
    no_validation,
    all_of,
    write_shipped,
    inspect_command,
    write_inspect_script,
    median,
    median_walls,
    paired_walls,
    run_pytest,
    use_runtime_env,
    child_env,
    copy_evals,
    expect_cases,
    fixture_with_meds,
    goal,
    per_case,
    read_record,
    table,
    tagged_bundles,
    temp_project,
    write_agents,
)

PREFETCH_GOAL = 1.05
IDEAL_GOAL = 1.1
SPEEDUP_GOAL = 10.0


class Suite:
    """Runs of the extraction suite over one data dir of the temp project."""

    def __init__(self, proj: Path, n: int, agent: str, env: dict[str, str], data: Path | None = None,
                 pre: tuple[str, ...] = (), before=None) -> None:
        self.proj, self.n, self.agent, self.env = proj, n, agent, env
        self.data = data if data is not None else proj / f"data-{n}"
        self.pre, self.before = pre, before  # (pytest options first, e.g. -p bench_shipped; before each run)

    def config(self, label: str, *extra: str, expect: int | None = None) -> Config:
        record = self.proj / ("record-" + re.sub(r"[^A-Za-z0-9]+", "-", label) + ".json")
        n = self.n if expect is None else expect

        def check(run) -> None:
            expect_cases(read_record(record), label, n, passed=True)
            record.unlink()
            record.with_suffix(".jsonl").unlink(missing_ok=True)  # the journal appends: start afresh

        args = [*self.pre, "test_extraction.py", f"--data-dir={self.data}", f"--agent=bench_agents:{self.agent}",
                f"--run-record={record}", *extra]
        return Config(label, self.proj, args, env=self.env, check=check, before=self.before)


def bench_prefetch(proj: Path, env: dict[str, str], n: int, n0: int, conc: int, repeat: int):
    print(f"\n1. instant agent, --concurrency {conc} vs 1: N={n} and N0={n0}, {repeat} paired rounds (order rotated)")
    configs = [Suite(proj, size, "Instant", env).config(f"instant N={size} --concurrency {c}", f"--concurrency={c}")
               for size in (n0, n) for c in (1, conc)]
    # every timed run in the same state: the bundle verdicts of both data dirs on disk (an
    # untimed run each), so no timed run is the one that validates them
    for size in (n0, n):
        prime = Suite(proj, size, "Instant", env).config(f"prime N={size}", "--concurrency=1")
        prime.check(run_pytest(proj, prime.args, label=prime.label, env=env))
    per_round = paired_walls(configs, repeat)
    walls = {c.label: median([w[c.label] for w in per_round]) for c in configs}
    pcs = {c: [per_case(w[f"instant N={n} --concurrency {c}"], w[f"instant N={n0} --concurrency {c}"], n, n0)
               for w in per_round] for c in (1, conc)}
    ratios = [a / b for a, b in zip(pcs[conc], pcs[1])]  # paired: within a round
    pc = {c: median(v) for c, v in pcs.items()}
    print()
    table(["", f"wall s N0={n0}", f"wall s N={n}", "µs/case (median)", "per round µs/case"], [
        [f"--concurrency {c}", f"{walls[f'instant N={n0} --concurrency {c}']:.2f}",
         f"{walls[f'instant N={n} --concurrency {c}']:.2f}", f"{pc[c] * 1e6:.0f}",
         " ".join(f"{x * 1e6:.0f}" for x in pcs[c])] for c in (1, conc)])
    wall_ratio = median([w[f"instant N={n} --concurrency {conc}"] / w[f"instant N={n} --concurrency 1"] for w in per_round])
    print(f"  per case {conc} vs 1 (median of the per-round ratios {' '.join(f'{r:.2f}' for r in ratios)}): "
          f"{median(ratios):.2f}x; whole wall at N={n}: {wall_ratio:.2f}x")
    return median(ratios), pc, wall_ratio


def bench_ideal(proj: Path, cold: Path, m: int, latency: float, conc: int, workers: int, repeat: int, xdist: bool,
                inspect_py: str | None = None):
    env = child_env(BENCH_LATENCY=str(latency))
    empty = lambda: shutil.rmtree(cold / ".groundeval", ignore_errors=True)  # noqa: E731 - a cold start
    shipped_env = write_shipped(cold, [proj / f"data-{m}"])
    states = {
        "warm": Suite(proj, m, "Sleepy", env),
        "fresh machine, shipped": Suite(cold, m, "Sleepy", {**env, **shipped_env}, data=proj / f"data-{m}",
                                        pre=("-p", "bench_shipped"), before=empty),
        "cold user data": Suite(cold, m, "Sleepy", env, data=proj / f"data-{m}", before=empty),
    }
    print(f"\n2. sleepy agent ({latency:g} s per call), {m} cases, --concurrency {conc}, in {len(states)} states "
          f"({', '.join(states)}); start-up = the same command with -k case-00000 (1 item) minus {latency:g} s; "
          f"{repeat} rounds, order rotated")
    prime = Suite(proj, m, "Instant", env).config(f"prime M={m}", "--concurrency=1")  # verdicts on disk, untimed
    prime.check(run_pytest(proj, prime.args, label=prime.label, env=env))
    pairs = {}
    for state, suite in states.items():
        full = suite.config(f"sleepy M={m} --concurrency {conc} ({state})", f"--concurrency={conc}")
        one = suite.config(f"sleepy 1 of M={m} --concurrency {conc} ({state})", f"--concurrency={conc}", "-k",
                           "case-00000", expect=1)
        if state.startswith("fresh"):
            for c in (full, one):
                c.check = all_of(c.check, no_validation(cold, c.label))
        pairs[state] = (full, one)
    configs = [c for pair in pairs.values() for c in pair]
    if inspect_py is not None:  # the peer, same files, prompts, latency and slots (max_samples)
        (proj / "data-one").mkdir(exist_ok=True)
        first = proj / f"data-{m}" / "case-00000.json"
        (proj / "data-one" / first.name).write_bytes(first.read_bytes())
        ienv = child_env(PYTHONPATH=str(proj))
        configs += [Config(f"inspect_ai sleepy M={m} max_samples={conc}", proj, [], env=ienv,
                           command=inspect_command(inspect_py, proj, proj / f"data-{m}", "sleepy", latency, conc)),
                    Config(f"inspect_ai sleepy 1 max_samples={conc}", proj, [], env=ienv,
                           command=inspect_command(inspect_py, proj, proj / "data-one", "sleepy", latency, conc))]
    best = median_walls(configs, repeat)
    waves = math.ceil(m / conc)
    ratios = {}
    print()
    for state, (full, one) in pairs.items():
        startup = best[one.label] - latency
        ideal = startup + waves * latency
        measured = best[full.label]
        ratios[state] = measured / ideal
        print(f"  {state}: measured {measured:.2f} s; ideal {ideal:.2f} s = start-up {startup:.2f} s + "
              f"ceil({m}/{conc})={waves} x {latency:g} s; measured/ideal {measured / ideal:.2f}x "
              f"(over the ideal: {measured - ideal:+.2f} s)")
    measured, startup = best[pairs["warm"][0].label], best[pairs["warm"][1].label] - latency
    if inspect_py is not None:
        i_full, i_one = best[f"inspect_ai sleepy M={m} max_samples={conc}"], best[f"inspect_ai sleepy 1 max_samples={conc}"]
        i_ideal = (i_one - latency) + waves * latency
        print(f"  inspect_ai (max_samples={conc}): measured {i_full:.2f} s; ideal {i_ideal:.2f} s; measured/ideal "
              f"{i_full / i_ideal:.2f}x; groundeval's wall (warm) / inspect_ai's: {measured / i_full:.2f}x "
              f"(informational)")
    suite = states["warm"]
    speedup = None
    if xdist:
        xd = suite.config(f"sleepy M={m} -n {workers} --concurrency 1", "-n", str(workers), "--concurrency=1")
        xd_one = suite.config(f"sleepy 1 of M={m} -n {workers} --concurrency 1", "-n", str(workers),
                              "--concurrency=1", "-k", "case-00000", expect=1)
        print(f"  -n {workers} --concurrency 1, for comparison (the full run once, its start-up {repeat} times):")
        xbest = {**median_walls([xd], 1), **median_walls([xd_one], repeat)}
        x_start = xbest[xd_one.label] - latency
        x_net = xbest[xd.label] - x_start
        c_net = measured - startup
        speedup = x_net / c_net
        table(["run", "wall s", "start-up s", "wall - start-up s", "ideal without start-up s"], [
            [f"-n {workers} --concurrency 1", f"{xbest[xd.label]:.2f}", f"{x_start:.2f}", f"{x_net:.2f}",
             f"{math.ceil(m / workers) * latency:.2f}"],
            [f"--concurrency {conc}", f"{measured:.2f}", f"{startup:.2f}", f"{c_net:.2f}", f"{waves * latency:.2f}"],
        ])
        print(f"  speed-up of --concurrency {conc} over -n {workers}: {speedup:.1f}x start-up subtracted, "
              f"{xbest[xd.label] / measured:.1f}x whole wall")
    return ratios, speedup


def bench_xdist_startup(proj: Path, env: dict[str, str], tiny: int, workers: int, repeat: int) -> tuple[float, float]:
    print(f"\n3. -n {workers} start-up: {tiny} instant cases with -n {workers} vs without, {repeat} rounds interleaved")
    suite = Suite(proj, tiny, "Instant", env)
    serial = suite.config(f"instant N={tiny}", "--concurrency=1")
    xd = suite.config(f"instant N={tiny} -n {workers}", "-n", str(workers), "--concurrency=1")
    best = median_walls([serial, xd], repeat)
    extra = best[xd.label] - best[serial.label]
    print(f"\n  without -n: {best[serial.label]:.2f} s; with -n {workers}: {best[xd.label]:.2f} s; "
          f"-n {workers} adds {extra:.2f} s of start-up ({best[xd.label] / best[serial.label]:.2f}x)")
    return extra, best[xd.label] / best[serial.label]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=2000, help="instant-agent suite size N for (1) (default 2000)")
    p.add_argument("--n0", type=int, default=100, help="small size N0 whose wall is subtracted in (1) (default 100)")
    p.add_argument("--sleep-cases", type=int, default=200, help="sleepy-agent cases M for (2) (default 200)")
    p.add_argument("--latency", type=float, default=0.25, help="sleepy agent's sleep per call, s (default 0.25)")
    p.add_argument("--concurrency", type=int, default=32, help="in-process concurrency (default 32)")
    p.add_argument("--workers", type=int, default=2, help="xdist workers (default 2)")
    p.add_argument("--tiny", type=int, default=4, help="cases of the tiny suite for (3) (default 4)")
    p.add_argument("--repeat", type=int, default=5, help="paired rounds (order rotated), median kept (default 5)")
    p.add_argument("--no-xdist-speedup", dest="xdist", action="store_false",
                   help="skip the -n comparison run of (2) (~15 s)")
    p.add_argument("--fixture", default="median", help="fixture to copy: median (default), smallest, largest, or a name")
    p.add_argument("--keep", action="store_true", help="keep the temp project")
    p.add_argument("--no-inspect", dest="inspect", action="store_false", help="skip the inspect_ai side of (2)")
    p.add_argument("--dev-env", action="store_true", help="run the children in this interpreter's environment")
    a = p.parse_args(argv)
    if a.n0 < 1 or a.cases <= a.n0:
        p.error(f"--cases ({a.cases}) must be larger than --n0 ({a.n0}) >= 1: the per-case cost is their difference")
    if a.concurrency < 2 or a.workers < 1 or a.sleep_cases < 2 or a.tiny < 1 or a.repeat < 1:
        p.error("--concurrency must be >= 2 (it is compared with 1), --workers, --tiny, --repeat >= 1, --sleep-cases >= 2")
    if a.latency <= 0:
        p.error("--latency must be > 0 (the ideal is counted in waves of it)")
    use_runtime_env(a.dev_env)
    inspect_py = inspect_python() if a.inspect else None

    source = fixture_with_meds(a.fixture)
    with temp_project("bench-concurrency-", keep=a.keep) as proj, \
            temp_project("bench-concurrency-cold-", keep=a.keep) as cold:
        copy_evals(proj)
        copy_evals(cold)
        truth = write_agents(proj, source)
        write_agents(cold, source)
        for n in {a.n0, a.cases, a.sleep_cases, a.tiny}:
            tagged_bundles(proj / f"data-{n}", source, n)
        print(f"fixture {source.name} ({source.stat().st_size:,} bytes, {len(truth)} active codes), copied N times")
        env = child_env()
        prefetch, pc, wall_ratio = bench_prefetch(proj, env, a.cases, a.n0, a.concurrency, a.repeat)
        if inspect_py:
            write_inspect_script(proj)
        ideal_ratios, speedup = bench_ideal(proj, cold, a.sleep_cases, a.latency, a.concurrency, a.workers, a.repeat, a.xdist,
                                           inspect_py)
        xd_extra, xd_ratio = bench_xdist_startup(proj, env, a.tiny, a.workers, max(a.repeat, 3))
    print()
    goal(f"instant agent per case, --concurrency {a.concurrency} {pc[a.concurrency] * 1e6:.0f} µs vs --concurrency 1 "
         f"{pc[1] * 1e6:.0f} µs (N={a.cases} vs N0={a.n0}; whole-wall ratio {wall_ratio:.2f}x)", prefetch, PREFETCH_GOAL)
    for state, ratio in ideal_ratios.items():
        goal(f"--concurrency {a.concurrency}, {a.sleep_cases} cases x {a.latency:g} s, {state}, measured vs ideal "
             f"(start-up + ceil(M/{a.concurrency}) x latency)", ratio, IDEAL_GOAL)
    if speedup is not None:
        goal(f"--concurrency {a.concurrency} speed-up over -n {a.workers} --concurrency 1, start-up subtracted",
             speedup, SPEEDUP_GOAL, at_least=True)
    print(f"-n {a.workers} start-up (workers really started, {a.tiny} cases): +{xd_extra:.2f} s over no -n, "
          f"ratio {xd_ratio:.2f}x (no goal set; informational)")


if __name__ == "__main__":
    main()
