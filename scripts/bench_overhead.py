"""Harness overhead as the user pays it: inside pytest, next to plain pytest items doing the
same I/O, measured side by side in one run (ratios, never absolute time limits).

1. Per-case cost. In fresh ``python -m pytest`` processes, the extraction suite (a copy of
   ``evals/test_extraction.py``) over a data dir of N bundle files (copies of one committed
   fixture, the median-sized one with active medications by default) with an *instant*
   agent (``--agent=bench_agents:Instant``, which returns the precomputed right answer, so
   agent cost is ~0 and the harness is what is timed), ``--concurrency 1``, a run record in
   the temp project; next to a plain parametrized test over the same N file paths that
   reads each file, ``orjson.loads`` it and asserts on it, run with ``-p no:groundeval``.
   Both get ``-q -p no:cacheprovider`` and the project's addopts
   (``-p no:langsmith_plugin -p no:anyio``). Per-case cost = (wall(N) - wall(N0)) / (N - N0),
   so start-up (interpreter, imports, plugin set-up) cancels. Each command is repeated
   ``--repeat`` times, interleaved with the others so machine noise hits both sides; the
   minimum is kept.  Goal: groundeval per case <= 1.5x the plain item per case.
   With ``--profile`` (default on) the N=max run and the N0 run are profiled (cProfile) and
   their difference printed per case: the top entries by tottime within pytest_groundeval,
   pydantic, orjson and _pytest, in µs per case (cProfile inflates small calls; read the
   shares, not the absolute numbers).
2. Collection (``--collect-only``) of ``--collect`` bundle files next to pytest collecting
   the same number of plain parametrized items over the same file paths (informational).

Usage: uv run python scripts/bench_overhead.py [--cases 1000 2000] [--small 100] [--repeat 3]
           [--collect 10000] [--fixture median|smallest|largest|NAME] [--no-profile] [--keep]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_util import (  # noqa: E402
    BenchFailure,
    Config,
    best_walls,
    child_env,
    copy_evals,
    diff_profiles,
    expect_cases,
    fixture_with_meds,
    goal,
    linked_bundles,
    load_profile,
    per_case,
    print_top,
    profile_run,
    read_record,
    table,
    tagged_bundles,
    temp_project,
    write_agents,
    write_plain_test,
)

PER_CASE_GOAL = 1.5
PROFILE_PACKAGES = ("pytest_groundeval", "pydantic", "orjson", "_pytest")


def eval_args(proj: Path, n: int, record: Path, *extra: str) -> list[str]:
    return ["test_extraction.py", f"--data-dir={proj / f'data-{n}'}", "--agent=bench_agents:Instant",
            "--concurrency=1", f"--run-record={record}", *extra]


def check_eval(record: Path, n: int, label: str):
    def check(run) -> None:
        expect_cases(read_record(record), label, n, passed=True)
        record.unlink()
        record.with_suffix(".jsonl").unlink(missing_ok=True)  # the journal appends: start each run afresh
    return check


def check_plain(n: int, label: str):
    def check(run) -> None:
        if not re.search(rf"\b{n} passed\b", run.stdout):
            raise BenchFailure(f"run {label!r}: expected '{n} passed'\n{run.tail()}")
    return check


def bench_per_case(proj: Path, sizes: list[int], n0: int, repeat: int) -> tuple[float, float]:
    configs = []
    for n in [n0, *sizes]:
        record = proj / f"record-{n}.json"
        configs.append(Config(f"groundeval N={n}", proj, eval_args(proj, n, record),
                              check=check_eval(record, n, f"groundeval N={n}")))
        configs.append(Config(f"plain N={n}", proj, ["test_plain.py", "-p", "no:groundeval"],
                              env=child_env(BENCH_DATA=str(proj / f"data-{n}")), check=check_plain(n, f"plain N={n}")))
    print(f"timing {len(configs)} commands x {repeat} rounds, interleaved:")
    best = best_walls(configs, repeat)
    rows, last = [], (0.0, 0.0)
    for n in sizes:
        g = per_case(best[f"groundeval N={n}"], best[f"groundeval N={n0}"], n, n0)
        p = per_case(best[f"plain N={n}"], best[f"plain N={n0}"], n, n0)
        rows.append([f"N={n} (vs N0={n0})", f"{best[f'groundeval N={n}']:.2f}", f"{best[f'plain N={n}']:.2f}",
                     f"{g * 1e6:.0f}", f"{p * 1e6:.0f}", f"{g / p:.2f}x"])
        last = (g, p)
    print()
    print(f"start-up (N0={n0}): groundeval {best[f'groundeval N={n0}']:.2f} s, plain {best[f'plain N={n0}']:.2f} s "
          f"(best of {repeat})")
    table(["sizes", "groundeval wall s", "plain wall s", "groundeval µs/case", "plain µs/case", "ratio"], rows)
    return last


def profile_per_case(proj: Path, n: int, n0: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        stats = {}
        for size in (n0, n):
            record = Path(tmp) / f"record-{size}.json"
            out = Path(tmp) / f"profile-{size}.prof"
            run = profile_run(proj, eval_args(proj, size, record), out, label=f"cProfile groundeval N={size}")
            check_eval(record, size, run.label)(run)
            stats["groundeval", size] = load_profile(out)
            out = Path(tmp) / f"profile-plain-{size}.prof"
            run = profile_run(proj, ["test_plain.py", "-p", "no:groundeval"], out, label=f"cProfile plain N={size}",
                              env=child_env(BENCH_DATA=str(proj / f"data-{size}")))
            check_plain(size, run.label)(run)
            stats["plain", size] = load_profile(out)
    extra = n - n0
    g = diff_profiles(stats["groundeval", n], stats["groundeval", n0])
    pl = diff_profiles(stats["plain", n], stats["plain", n0])
    g_total, p_total = (sum(v[2] for v in d.values()) / extra for d in (g, pl))
    print(f"\nprofile of the per-case cost (cProfile of N={n} minus N={n0}, per extra case): profiled total "
          f"groundeval {g_total * 1e6:.0f} µs/case, plain {p_total * 1e6:.0f} µs/case "
          f"(cProfile inflates calls; read shares, not absolutes)")
    print_top(g, by="tottime", top=25, packages=PROFILE_PACKAGES, per=extra,
              title=f"  groundeval: top 25 by tottime within {', '.join(PROFILE_PACKAGES)}:")
    print_top(g, by="cumtime", top=20, packages=("pytest_groundeval",), per=extra,
              title="  groundeval: top 20 by cumtime within pytest_groundeval:")
    print_top(diff_profiles(g, pl), by="tottime", top=20, per=extra,
              title="  groundeval minus plain (what an eval item costs beyond a plain one): top 20 by tottime:")
    print_top(pl, by="tottime", top=10, per=extra, title="  plain: top 10 by tottime:")


def bench_collection(proj: Path, n: int, n0: int, repeat: int) -> None:
    configs = []
    for size, folder in ((n0, proj / f"data-{n0}"), (n, proj / f"collect-{n}")):
        configs.append(Config(f"collect groundeval N={size}", proj,
                              ["--collect-only", "test_extraction.py", f"--data-dir={folder}"]))
        configs.append(Config(f"collect plain N={size}", proj, ["--collect-only", "test_plain.py", "-p", "no:groundeval"],
                              env=child_env(BENCH_DATA=str(folder))))
    print(f"\ncollection: {len(configs)} commands x {repeat} rounds, interleaved:")
    best = best_walls(configs, repeat)
    g, p = best[f"collect groundeval N={n}"], best[f"collect plain N={n}"]
    gi = per_case(g, best[f"collect groundeval N={n0}"], n, n0)
    pi = per_case(p, best[f"collect plain N={n0}"], n, n0)
    print(f"\ncollection of {n:,} bundle files (--collect-only, fresh processes, best of {repeat})")
    table(["", "groundeval", "plain", "ratio"], [
        ["wall s (start-up included)", f"{g:.2f}", f"{p:.2f}", f"{g / p:.2f}x"],
        [f"µs per item (vs N0={n0})", f"{gi * 1e6:.0f}", f"{pi * 1e6:.0f}", f"{gi / pi:.2f}x"],
    ])
    print(f"collection: {n:,} bundle files vs {n:,} plain items: ratio {g / p:.2f}x wall, "
          f"{gi / pi:.2f}x per item (no goal set; informational)")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, nargs="+", default=[1000, 2000], help="suite sizes N (default 1000 2000)")
    p.add_argument("--small", type=int, default=100, help="the small size N0 whose wall is subtracted (default 100)")
    p.add_argument("--repeat", type=int, default=3, help="rounds per command; the minimum is kept (default 3)")
    p.add_argument("--collect", type=int, default=10_000, help="bundle files to collect (default 10000; 0: skip)")
    p.add_argument("--fixture", default="median", help="fixture to copy: median (default), smallest, largest, or a name")
    p.add_argument("--no-profile", dest="profile", action="store_false", help="skip the cProfile of the per-case cost")
    p.add_argument("--keep", action="store_true", help="keep the temp project")
    a = p.parse_args(argv)
    sizes = sorted(set(a.cases))
    if sizes[0] <= a.small:
        p.error("--cases must all be larger than --small")

    source = fixture_with_meds(a.fixture)
    with temp_project("bench-overhead-", keep=a.keep) as proj:
        copy_evals(proj)
        write_plain_test(proj)
        truth = write_agents(proj, source)
        for n in {a.small, *sizes}:
            tagged_bundles(proj / f"data-{n}", source, n)
        if a.collect:  # only listed, never read: hard links to one file
            linked_bundles(proj / f"collect-{a.collect}", source, a.collect)
        print(f"fixture {source.name} ({source.stat().st_size:,} bytes, {len(truth)} active codes), copied N times; "
              f"instant agent, --concurrency 1")
        g, pl = bench_per_case(proj, sizes, a.small, a.repeat)
        if a.profile:
            profile_per_case(proj, sizes[-1], a.small)
        if a.collect:
            bench_collection(proj, a.collect, a.small, a.repeat)
    print()
    goal(f"per-case cost inside pytest, groundeval {g * 1e6:.0f} µs vs plain item {pl * 1e6:.0f} µs "
         f"(N={sizes[-1]} vs N0={a.small}, best of {a.repeat})", g / pl, PER_CASE_GOAL)


if __name__ == "__main__":
    main()
