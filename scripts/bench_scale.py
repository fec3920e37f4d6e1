"""Linear scaling with most cases failing: does a 5,000-case eval cost 5x a 1,000-case one
when ~71% of the cases fail? Measured inside pytest, side by side in one run.

The extraction suite (a copy of ``evals/test_extraction.py``) over N bundle files, each a
copy of one committed fixture tagged with its index (``"id": "bench-<i>"``), with the
agent ``bench_agents:MostlyWrong``: instant, and wrong for 5 cases in 7 by case index
(omits a code or hallucinates one), so 71% of the items fail through ``pytest.fail`` and
pytest's failure summary. Each size runs in fresh ``python -m pytest`` processes
(``-q -p no:cacheprovider``, the project's addopts, ``--concurrency 1``, a run record in
the temp project; the runtime environment, ``.venv-runtime``), ``--repeat`` paired rounds (order rotated), median kept.

cost(N) = N x (wall(N) - wall(N0)) / (N - N0), with a tiny N0 run of the same suite, so
start-up cancels.  Goal: cost(5000) <= 5.5 x cost(1000), cold and warm, each reported apart
(never one median over a cold and a warm round): cold = ``.groundeval/`` emptied before every
run (every bundle validated, ahead of the items), warm = a second project whose bundle verdicts
an untimed run of each size stored first.  The raw wall ratio is printed too.

Also timed once (diagnostic): the same failing runs with ``--tb=line``, which skips
pytest's per-failure teardown-section lookup, to show how much of the excess is that.

With ``--profile`` (default on) the 1000 and 5000 runs are run under cProfile: the top
entries by tottime and cumtime of the 5000 run, the functions whose time grows most
faster than linearly from 1000 to 5000 (excess over 5x), and the phases of the run's end.

Usage: uv run python scripts/bench_scale.py [--small 1000] [--large 5000] [--n0 20] [--repeat 2]
           [--fixture median|smallest|largest|NAME] [--no-profile] [--no-tb-line] [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_util import (  # noqa: E402
    BenchFailure,
    Config,
    median_walls,
    run_pytest,
    use_runtime_env,
    copy_evals,
    expect_cases,
    fixture_with_meds,
    func_label,
    goal,
    load_profile,
    outcomes,
    per_case,
    print_top,
    profile_run,
    read_record,
    table,
    tagged_bundles,
    temp_project,
    write_agents,
)

GOAL = 5.5
STATES = ("cold", "warm")
# the end-of-run phases, (file suffix, function): where a super-linear cost would sit
PHASES = [  # (file suffix, function, label, top level?): the top-level ones partition the work that grows with N
    ("_pytest/main.py", "pytest_collection", "collection", True),
    ("_pytest/main.py", "pytest_runtestloop", "the item loop (every item's setup/call/teardown + reports)", True),
    ("pytest_groundeval/pytest/reporter.py", "pytest_runtest_logreport", "  groundeval per report (journal)", False),
    ("pytest_groundeval/pytest/reporter.py", "finish", "groundeval at session finish (summary, gate, record)", True),
    ("_pytest/terminal.py", "pytest_terminal_summary", "pytest's terminal summary, all of it", True),
    ("_pytest/terminal.py", "summary_failures", "  FAILURES section", False),
    ("_pytest/terminal.py", "_handle_teardown_sections", "    teardown-section lookup, once per failure", False),
    ("_pytest/terminal.py", "_outrep_summary", "    printing each failure", False),
    ("_pytest/terminal.py", "short_test_summary", "  short test summary info", False),
    ("pytest_groundeval/pytest/reporter.py", "pytest_terminal_summary", "  groundeval summary", False),
]


def expected_failures(n: int) -> int:
    return sum(1 for i in range(n) if i % 7 < 5)


def args_for(proj: Path, n: int, record: Path, *extra: str) -> list[str]:
    """(``proj``: where the data dirs are; both projects read the cold one's)"""
    return ["test_extraction.py", f"--data-dir={proj / f'data-{n}'}", "--agent=bench_agents:MostlyWrong",
            "--concurrency=1", f"--run-record={record}", *extra]


def check(record: Path, n: int, label: str):
    def inner(run) -> None:
        rec = read_record(record)
        expect_cases(rec, label, n)
        got = outcomes(rec)
        if got.get("failed", 0) != expected_failures(n) or got.get("passed", 0) != n - expected_failures(n):
            raise BenchFailure(f"run {label!r}: outcomes {dict(got)}, expected {expected_failures(n)} failed")
        record.unlink()
        record.with_suffix(".jsonl").unlink(missing_ok=True)  # the journal appends: start each run afresh
    return inner


def find(stats: dict, file_suffix: str, func: str) -> tuple | None:
    for k, v in stats.items():
        if k[0].endswith(file_suffix) and k[2] == func:
            return v
    return None


def profile(proj: Path, data: Path, small: int, large: int) -> None:
    """cProfile of the failing runs in ``proj`` (the warm project) over ``data``'s data dirs."""
    with tempfile.TemporaryDirectory(prefix="bench-scale-profile-") as tmp:
        stats = {}
        for n in (small, large):
            record, out = Path(tmp) / f"record-{n}.json", Path(tmp) / f"profile-{n}.prof"
            print(f"  cProfile of the failing N={n} run ...", flush=True)
            run = profile_run(proj, args_for(data, n, record), out, ok=(0, 1), label=f"cProfile failing N={n}")  # cProfile drops the exit status
            check(record, n, run.label)(run)
            stats[n] = load_profile(out)
    k = large / small
    big, sm = stats[large], stats[small]
    total = {n: max(v[3] for v in s.values()) for n, s in stats.items()}
    print(f"\nprofile (cProfile, slower than real time): total {total[small]:.1f} s at N={small}, "
          f"{total[large]:.1f} s at N={large} ({total[large] / total[small]:.1f}x for {k:g}x the cases, start-up included)")
    print_top(big, by="tottime", top=15, title=f"  N={large}: top 15 by tottime:")
    print_top(big, by="cumtime", top=25, title=f"  N={large}: top 25 by cumtime:")

    rows = []
    for key, (cc, nc, tt, ct) in big.items():
        s = sm.get(key, (0, 0, 0.0, 0.0))
        excess = tt - k * s[2]
        rows.append((excess, key, s, (cc, nc, tt, ct)))
    rows.sort(key=lambda r: r[0], reverse=True)
    print(f"\n  super-linear: functions whose own time (tottime) grew most beyond {k:g}x from N={small} to N={large}:")
    table(["function", f"calls N={small}", f"calls N={large}", f"tottime N={small}", f"tottime N={large}",
           "growth", f"excess over {k:g}x s"],
          [[func_label(key), s[1], b[1], f"{s[2]:.3f}", f"{b[2]:.3f}",
            f"{b[2] / s[2]:.1f}x" if s[2] > 0 else "new", f"{excess:.2f}"] for excess, key, s, b in rows[:12]])

    found = [(what, f"{suffix}:{func}", top, find(sm, suffix, func), find(big, suffix, func))
             for suffix, func, what, top in PHASES]
    found = [f for f in found if f[3] is not None and f[4] is not None]
    excess_total = sum(b[3] - k * a[3] for _, _, top, a, b in found if top)
    print(f"  total excess over {k:g}x of the top-level phases below: {excess_total:.2f} s (profiled time)")
    print("\n  phases (cumtime; the unindented ones partition the work that grows with N):")
    table(["phase", "function", f"cum s N={small}", f"cum s N={large}", "growth", f"excess over {k:g}x s",
           "share of excess"],
          [[what, where, f"{a[3]:.2f}", f"{b[3]:.2f}", f"{b[3] / a[3]:.1f}x" if a[3] else "-",
            f"{b[3] - k * a[3]:.2f}", f"{(b[3] - k * a[3]) / excess_total:.0%}" if excess_total > 0 else "-"]
           for what, where, top, a, b in found])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", type=int, default=1000, help="the smaller suite (default 1000)")
    p.add_argument("--large", type=int, default=5000, help="the larger suite (default 5000)")
    p.add_argument("--n0", type=int, default=20, help="the tiny suite whose wall is subtracted (default 20)")
    p.add_argument("--repeat", type=int, default=2, help="paired rounds, order rotated; the median is kept (default 2)")
    p.add_argument("--fixture", default="median", help="fixture to copy: median (default), smallest, largest, or a name")
    p.add_argument("--no-profile", dest="profile", action="store_false", help="skip the cProfile runs")
    p.add_argument("--no-tb-line", dest="tb_line", action="store_false", help="skip the --tb=line diagnostic")
    p.add_argument("--keep", action="store_true", help="keep the temp project")
    p.add_argument("--dev-env", action="store_true", help="run the children in this interpreter's environment")
    a = p.parse_args(argv)
    use_runtime_env(a.dev_env)
    if not a.n0 < a.small < a.large:
        p.error("need --n0 < --small < --large")

    source = fixture_with_meds(a.fixture)
    n0, small, large = a.n0, a.small, a.large
    with temp_project("bench-scale-", keep=a.keep) as proj, temp_project("bench-scale-warm-", keep=a.keep) as warm:
        for project in (proj, warm):
            copy_evals(project)
            truth = write_agents(project, source)
        for n in (n0, small, large):
            tagged_bundles(proj / f"data-{n}", source, n)
        print(f"fixture {source.name} ({source.stat().st_size:,} bytes, {len(truth)} active codes), copied N times; "
              f"agent MostlyWrong ({expected_failures(large) / large:.0%} of cases fail), --concurrency 1")

        def config(state: str, n: int, *extra: str) -> Config:
            project = proj if state == "cold" else warm
            label = f"{state} failing N={n}" + (f" {' '.join(extra)}" if extra else "")
            record = project / f"record-{n}{'-'.join(extra)}.json"
            empty = (lambda: shutil.rmtree(proj / ".groundeval", ignore_errors=True)) if state == "cold" else None
            return Config(label, project, args_for(proj, n, record, *extra), ok=(1,), check=check(record, n, label),
                          before=empty)

        print("priming the warm project (its .groundeval/bundles), untimed:")
        for n in (n0, small, large):
            c = config("warm", n)
            c.check(run_pytest(warm, c.args, label=f"prime N={n}", ok=(1,)))
        print(f"timing 6 commands (cold and warm) x {a.repeat} rounds, order rotated:")
        best = median_walls([config(state, n) for state in STATES for n in (n0, small, large)], a.repeat)
        tb = {}
        if a.tb_line:
            print("diagnostic, once each, warm: the same runs with --tb=line")
            tb = median_walls([config("warm", n, "--tb=line") for n in (n0, small, large)], 1)

        def cost(walls: dict, state: str, n: int, suffix: str = "") -> float:
            return n * per_case(walls[f"{state} failing N={n}{suffix}"], walls[f"{state} failing N={n0}{suffix}"], n, n0)

        def row(name: str, walls: dict, state: str, suffix: str = "") -> list[str]:
            w = {n: walls[f"{state} failing N={n}{suffix}"] for n in (n0, small, large)}
            return [name, f"{w[n0]:.2f}", f"{w[small]:.2f}", f"{w[large]:.2f}",
                    f"{cost(walls, state, small, suffix) / small * 1e6:.0f}",
                    f"{cost(walls, state, large, suffix) / large * 1e6:.0f}", f"{w[large] / w[small]:.2f}x",
                    f"{cost(walls, state, large, suffix) / cost(walls, state, small, suffix):.2f}x"]

        rows = [row(f"{state} (--tb=auto)", best, state) for state in STATES]
        if tb:
            rows.append(row("warm --tb=line (once)", tb, "warm", " --tb=line"))
        print()
        table(["run", f"wall s N0={n0}", f"wall s N={small}", f"wall s N={large}", f"µs/case N={small}",
               f"µs/case N={large}", "wall ratio", "cost ratio (start-up subtracted)"], rows)
        if a.profile:
            print()
            profile(warm, proj, small, large)
    print()
    for state in STATES:
        ratio = cost(best, state, large) / cost(best, state, small)
        raw = best[f"{state} failing N={large}"] / best[f"{state} failing N={small}"]
        goal(f"{large} cases ({expected_failures(large) / large:.0%} failing) cost vs {small}, {state}, start-up "
             f"subtracted (raw wall ratio {raw:.2f}x, median of {a.repeat} rounds)", ratio, GOAL)

if __name__ == "__main__":
    main()
