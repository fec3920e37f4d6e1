"""Harness overhead as the user pays it: inside pytest, next to plain pytest items that read
and parse the same bundles, and next to inspect_ai on the same instant-agent work, measured
side by side in one run (ratios, never absolute time limits).

Every command is a fresh child process in the runtime environment (``uv sync --no-dev``
into ``.venv-runtime``; ``--dev-env``: this interpreter's, with the dev group's pytest
plugins), over the same N bundle files: one committed fixture (the median-sized one with
active medications by default) tagged with its index (``"id": "bench-<i>"``), so the N
cases are distinct bundles (N content hashes: the bundle memo validates each once, nothing
is deduplicated).

- groundeval cold: the extraction suite (a copy of ``evals/test_extraction.py``) with an
  instant agent (``bench_agents:Instant``, the precomputed right answer), ``--concurrency 1``,
  a run record; ``.groundeval/`` emptied before every run, so every bundle is validated
  and its verdict stored during the run;
- groundeval warm: the same, in a second project whose ``.groundeval/bundles`` an earlier
  (untimed) run filled: a re-run of an unchanged suite;
- groundeval shipped: cold (``.groundeval/`` emptied before every run) but with every bundle's
  verdict in a shipped-verdicts file (``-p bench_shipped`` points the package's file at one
  written for these bundles): what the bundled suites are on a fresh machine, at N cases. Each
  run must store no verdict (none validated);
- plain fhir: a plain parametrized test over the same file paths that reads each file and
  parses it into a ``fhir.resources`` R4B ``Bundle`` (``-p no:groundeval``): the goal's
  "plain pytest item that reads and parses the same bundle";
- plain json: the same, ``orjson.loads`` only (a reference, no goal);
- inspect_ai: one Sample per file in the same prompt, a solver giving the same answer at once,
  a scorer comparing the answer's codes, inspect's own log, in its own clean environment
  (``.venv-inspect``: ``uv venv`` + the locked ``inspect-ai`` alone, made once by the script).

Per-case cost = (wall(N) - wall(N0)) / (N - N0), so start-up cancels. ``--rounds`` paired
rounds: each round runs every command once, the order rotated; the ratios are taken within
a round and their median over the rounds is printed.  Goals: a case cold <= 1.5x the plain
fhir item, warm <= 1.1x; groundeval's per-case overhead <= 0.25x inspect_ai's on a fresh
machine's run of the bundled suites (shipped: cold, nothing on disk) and warm. User data seen
for the first time (cold) is printed against inspect_ai too, with its floor (no goal).
``--profile`` adds a cProfile of the per-case cost (cold, against the plain fhir item); ``--collect N`` a collection comparison.

Usage: uv run python scripts/bench_overhead.py [--cases 1000] [--small 100] [--rounds 5]
           [--fixture median|smallest|largest|NAME] [--no-inspect] [--dev-env] [--profile] [--collect N] [--keep]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_util import (  # noqa: E402
    BenchFailure,
    Config,
    inspect_python,
    no_validation,
    all_of,
    write_shipped,
    best_walls,
    inspect_command,
    median,
    paired_walls,
    run_pytest,
    use_runtime_env,
    write_inspect_script,
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

COLD_GOAL = 1.5
WARM_GOAL = 1.1
INSPECT_GOAL = 0.25

PLAIN_FHIR = '''"""The plain-pytest counterpart that reads and parses the same bundles: one parametrized
item per bundle file of $BENCH_DATA, each reading the file and parsing it into a
fhir.resources R4B Bundle (what a plain test over FHIR data does), asserting on it."""
import os

import orjson
import pytest
from fhir.resources.R4B.bundle import Bundle

DATA = os.environ["BENCH_DATA"]
with os.scandir(DATA) as it:
    PATHS = sorted(e.path for e in it if e.name.endswith(".json"))


@pytest.mark.parametrize("path", PATHS, ids=[os.path.basename(p)[:-5] for p in PATHS])
def test_plain(path):
    with open(path, "rb") as f:
        bundle = Bundle.model_validate(orjson.loads(f.read()))
    assert bundle.entry
'''
PROFILE_PACKAGES = ("pytest_groundeval", "pydantic", "orjson", "_pytest")


def eval_args(proj: Path, n: int, record: Path, *extra: str) -> list[str]:
    return ["test_extraction.py", f"--data-dir={proj / f'data-{n}'}", "--agent=bench_agents:Instant",
            "--concurrency=1", f"--run-record={record}", *extra]


def check_eval(record: Path, n: int, label: str):
    def check(run) -> None:  # (run: unused)
        expect_cases(read_record(record), label, n, passed=True)
        record.unlink()
        record.with_suffix(".jsonl").unlink(missing_ok=True)  # the journal appends: start each run afresh
    return check


def check_plain(n: int, label: str):
    def check(run) -> None:
        if not re.search(rf"\b{n} passed\b", run.stdout):
            raise BenchFailure(f"run {label!r}: expected '{n} passed'\n{run.tail()}")
    return check


def bench_per_case(proj: Path, warm: Path, sizes: list[int], n0: int, rounds: int, inspect_py: str | None,
                   shipped_env: dict[str, str]):
    """Paired rotations: every command once per round, the order rotated; per-case costs and
    their ratios are computed within each round and the median over rounds is kept."""
    configs = []
    for n in [n0, *sizes]:
        record = proj / f"record-{n}.json"
        configs.append(Config(f"groundeval cold N={n}", proj, eval_args(proj, n, record),
                              check=check_eval(record, n, f"groundeval cold N={n}"),
                              before=lambda: shutil.rmtree(proj / ".groundeval", ignore_errors=True)))
        srecord = proj / f"record-shipped-{n}.json"
        configs.append(Config(f"groundeval shipped N={n}", proj, ["-p", "bench_shipped", *eval_args(proj, n, srecord)],
                              env=child_env(**shipped_env), before=lambda: shutil.rmtree(proj / ".groundeval",
                                                                                         ignore_errors=True),
                              check=all_of(check_eval(srecord, n, f"groundeval shipped N={n}"),
                                          no_validation(proj, f"groundeval shipped N={n}"))))
        wrecord = warm / f"record-{n}.json"
        configs.append(Config(f"groundeval warm N={n}", warm, eval_args(proj, n, wrecord),
                              check=check_eval(wrecord, n, f"groundeval warm N={n}")))
        for kind in ("fhir", "json"):
            configs.append(Config(f"plain {kind} N={n}", proj, [f"test_plain_{kind}.py", "-p", "no:groundeval"],
                                  env=child_env(BENCH_DATA=str(proj / f"data-{n}")),
                                  check=check_plain(n, f"plain {kind} N={n}")))
        if inspect_py is not None:
            configs.append(Config(f"inspect_ai N={n}", proj, [], env=child_env(PYTHONPATH=str(proj)),
                                  command=inspect_command(inspect_py, proj, proj / f"data-{n}")))
    print("priming the warm project (its .groundeval/bundles), untimed:")
    for n in [n0, *sizes]:
        record = warm / f"prime-{n}.json"
        run_pytest(warm, eval_args(proj, n, record), label=f"prime N={n}")
        check_eval(record, n, f"prime N={n}")(None)
    stored = sum(1 for _ in (warm / ".groundeval" / "bundles").rglob("*.bin"))
    if stored < max(sizes):  # else "warm" would silently be a second cold figure
        raise BenchFailure(f"the warm project holds {stored} stored bundle verdicts after priming, expected at least "
                           f"{max(sizes)} (is GROUNDEVAL_BUNDLE_CACHE off in this environment?)")
    print(f"timing {len(configs)} commands x {rounds} rounds, paired rotations:")
    per_round = paired_walls(configs, rounds)
    kinds = ["groundeval cold", "groundeval shipped", "groundeval warm", "plain fhir", "plain json"] + \
        (["inspect_ai"] if inspect_py else [])
    n = sizes[-1]
    pcs = {k: [per_case(w[f"{k} N={n}"], w[f"{k} N={n0}"], n, n0) for w in per_round] for k in kinds}
    med = {k: median(v) for k, v in pcs.items()}

    def ratio(a: str, b: str) -> float:  # the median of the per-round (paired) ratios
        return median([x / y for x, y in zip(pcs[a], pcs[b])])

    print()
    print(f"start-up (N0={n0}, median wall): " + ", ".join(
        f"{k} {median([w[f'{k} N={n0}'] for w in per_round]):.2f} s" for k in kinds))
    table(["command", f"median wall s N={n}", "µs/case (median)", "per round µs/case"],
          [[k, f"{median([w[f'{k} N={n}'] for w in per_round]):.2f}", f"{med[k] * 1e6:.0f}",
            " ".join(f"{x * 1e6:.0f}" for x in pcs[k])] for k in kinds])
    return med, ratio


def pool_min() -> int:
    """From how many cold bundles validation goes to worker processes (``fhir/warmup.py``)."""
    from pytest_groundeval.fhir.warmup import POOL_MIN

    return POOL_MIN


def profile_per_case(proj: Path, n: int, n0: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        stats = {}
        for size in (n0, n):
            record = Path(tmp) / f"record-{size}.json"
            out = Path(tmp) / f"profile-{size}.prof"
            shutil.rmtree(proj / ".groundeval", ignore_errors=True)  # cold, as the goal's figure
            run = profile_run(proj, eval_args(proj, size, record), out, label=f"cProfile groundeval cold N={size}")
            check_eval(record, size, run.label)(run)
            stats["groundeval", size] = load_profile(out)
            out = Path(tmp) / f"profile-plain-{size}.prof"
            run = profile_run(proj, ["test_plain_fhir.py", "-p", "no:groundeval"], out, label=f"cProfile plain fhir N={size}",
                              env=child_env(BENCH_DATA=str(proj / f"data-{size}")))
            check_plain(size, run.label)(run)
            stats["plain", size] = load_profile(out)
    extra = n - n0
    g = diff_profiles(stats["groundeval", n], stats["groundeval", n0])
    pl = diff_profiles(stats["plain", n], stats["plain", n0])
    g_total, p_total = (sum(v[2] for v in d.values()) / extra for d in (g, pl))
    print(f"\nprofile of the per-case cost (cProfile of N={n} minus N={n0}, per extra case; groundeval cold, the "
          f"plain fhir item): profiled total groundeval {g_total * 1e6:.0f} µs/case, plain {p_total * 1e6:.0f} µs/case "
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
        configs.append(Config(f"collect plain N={size}", proj, ["--collect-only", "test_plain_json.py", "-p", "no:groundeval"],
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
    p.add_argument("--cases", type=int, nargs="+", default=[1000], help="suite sizes N (default 1000)")
    p.add_argument("--small", type=int, default=100, help="the small size N0 whose wall is subtracted (default 100)")
    p.add_argument("--rounds", type=int, default=5, help="paired rounds, order rotated; medians (default 5)")
    p.add_argument("--collect", type=int, default=0, help="bundle files to collect (default 0: skip)")
    p.add_argument("--fixture", default="median", help="fixture to tag: median (default), smallest, largest, or a name")
    p.add_argument("--profile", action="store_true", help="also cProfile the per-case cost")
    p.add_argument("--no-inspect", dest="inspect", action="store_false", help="skip the inspect_ai side")
    p.add_argument("--dev-env", action="store_true", help="run the children in this interpreter's environment")
    p.add_argument("--keep", action="store_true", help="keep the temp project")
    a = p.parse_args(argv)
    sizes = sorted(set(a.cases))
    if a.small < 1 or sizes[0] <= a.small:
        p.error("--cases must all be larger than --small, and --small >= 1")
    if a.rounds < 1:
        p.error("--rounds must be >= 1")
    use_runtime_env(a.dev_env)
    inspect_py = inspect_python() if a.inspect else None

    source = fixture_with_meds(a.fixture)
    with temp_project("bench-overhead-", keep=a.keep) as proj, temp_project("bench-overhead-warm-", keep=a.keep) as warm:
        copy_evals(proj)
        copy_evals(warm)
        write_plain_test(proj, "test_plain_json.py")
        (proj / "test_plain_fhir.py").write_text(PLAIN_FHIR)
        truth = write_agents(proj, source)
        write_agents(warm, source)
        if inspect_py:
            write_inspect_script(proj)
        for n in {a.small, *sizes}:
            tagged_bundles(proj / f"data-{n}", source, n)  # distinct cases: each file its own content hash
        print("validating every bundle once for the shipped-verdicts file (untimed) ...", flush=True)
        shipped_env = write_shipped(proj, [proj / f"data-{n}" for n in {a.small, *sizes}])
        if a.collect:  # only listed, never read: hard links to one file
            linked_bundles(proj / f"collect-{a.collect}", source, a.collect)
        print(f"fixture {source.name} ({source.stat().st_size:,} bytes, {len(truth)} active codes), tagged N times "
              f"(N distinct bundles); instant agent, --concurrency 1; groundeval cold = .groundeval/ emptied before "
              f"each run, warm = its bundle verdicts stored by an earlier run")
        med, ratio = bench_per_case(proj, warm, sizes, a.small, a.rounds, inspect_py, shipped_env)
        if a.profile:
            profile_per_case(proj, sizes[-1], a.small)
        if a.collect:
            bench_collection(proj, a.collect, a.small, a.rounds)
    us = {k: v * 1e6 for k, v in med.items()}
    print()
    print(f"(reference, no goal: groundeval cold vs a plain item that only reads + orjson-parses the file: "
          f"{ratio('groundeval cold', 'plain json'):.2f}x; warm {ratio('groundeval warm', 'plain json'):.2f}x)")
    tail = f"(N={sizes[-1]} vs N0={a.small}, median of {a.rounds} paired rounds)"
    goal(f"a case inside pytest, cold, {us['groundeval cold']:.0f} µs vs a plain item reading + parsing the same "
         f"bundle (R4B Bundle) {us['plain fhir']:.0f} µs {tail}", ratio("groundeval cold", "plain fhir"), COLD_GOAL)
    goal(f"a case inside pytest, warm, {us['groundeval warm']:.0f} µs vs the same plain item {us['plain fhir']:.0f} µs "
         f"{tail}", ratio("groundeval warm", "plain fhir"), WARM_GOAL)
    if inspect_py:
        goal(f"per-case overhead, instant agent, a fresh machine's run of the bundled suites (verdicts shipped, "
             f"nothing on disk) {us['groundeval shipped']:.0f} µs vs inspect_ai {us['inspect_ai']:.0f} µs {tail}",
             ratio("groundeval shipped", "inspect_ai"), INSPECT_GOAL)
        goal(f"per-case overhead, instant agent, groundeval warm {us['groundeval warm']:.0f} µs vs inspect_ai "
             f"{us['inspect_ai']:.0f} µs {tail}", ratio("groundeval warm", "inspect_ai"), INSPECT_GOAL)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        validation = us["plain fhir"] - us["plain json"]  # R4B validation of one bundle, inside a pytest item
        floor = (validation + us["groundeval warm"]) / cores
        print(f"(reference, no goal: user data seen for the first time, cold, every bundle validated (ahead of the "
              f"items: one thread, or worker processes from {pool_min()} cold bundles): {us['groundeval cold']:.0f} µs = "
              f"{ratio('groundeval cold', 'inspect_ai'):.2f}x inspect_ai; its floor on this machine: validating a "
              f"bundle costs {validation:.0f} µs (plain fhir - plain json) and the rest of a case "
              f"{us['groundeval warm']:.0f} µs (warm); over all {cores} cores with no loss, a cold case cannot cost "
              f"less than {floor:.0f} µs = {floor / us['inspect_ai']:.2f}x inspect_ai)")

if __name__ == "__main__":
    main()
