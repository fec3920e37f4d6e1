"""Memory per case: a 5,000-case extraction run next to a 1,000-case run, each child's own peak RSS.

Bundles are distinct patients: case i re-identifies committed fixture i mod 45 (every UUID
replaced consistently with uuid5(i, old), the patient renamed), so no two cases share a
content hash and nothing is deduplicated. Both runs are fresh ``python -m pytest`` children
in the runtime environment (``uv sync --no-dev`` into ``.venv-runtime``; ``--dev-env`` for
this interpreter's), the offline ``baseline`` agent by default, a run record each, the bundle
memo cold (``.groundeval/bundles`` emptied before every run). Each child reads its own peak RSS
at ``pytest_unconfigure`` (a ``-p bench_rss`` plugin): on Linux ``VmHWM`` of ``/proc/self/status``,
the peak of its own memory since its exec (not ``ru_maxrss``, which carries over the peak of the
parent a vfork-started child replaced: a 10 MiB plain run read its 310 MiB parent's), so nothing
but the pytest process itself is counted, the plain reference included. ``--rounds`` rounds, the order rotated each round;
the median kept.

per case = (RSS(large) - RSS(small)) / (large - small): what one more case keeps.
Goal: <= 15 KiB per case at 5,000 cases.  Also printed: plain pytest's own growth for as
many parametrized items (no groundeval), for reference.

Usage: uv run python scripts/bench_memory.py [--small 1000] [--large 5000] [--rounds 1]
           [--agent baseline] [--dev-env] [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_util import (  # noqa: E402
    BenchFailure,
    copy_evals,
    expect_cases,
    goal,
    median,
    mib,
    read_record,
    reidentified_bundles,
    run_pytest,
    table,
    temp_project,
    use_runtime_env,
)

GOAL_KIB = 15.0


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", type=int, default=1000, help="cases in the small run (default 1000)")
    p.add_argument("--large", type=int, default=5000, help="cases in the large run (default 5000)")
    p.add_argument("--rounds", type=int, default=1, help="rounds, order rotated, median kept (default 1)")
    p.add_argument("--agent", default="baseline", help="agent of both runs (default baseline)")
    p.add_argument("--dev-env", action="store_true", help="run the children in this interpreter's environment")
    p.add_argument("--keep", action="store_true", help="keep the temp project")
    a = p.parse_args(argv)
    if a.small < 1 or a.large <= a.small or a.rounds < 1:
        p.error(f"need 1 <= --small ({a.small}) < --large ({a.large}) and --rounds >= 1: per case is their difference")
    use_runtime_env(a.dev_env)

    with temp_project("groundeval-bench-mem-", keep=a.keep) as proj:
        copy_evals(proj)
        reidentified_bundles(proj / "data-large", a.large)
        data_small = proj / "data-small"
        data_small.mkdir()
        for path in sorted((proj / "data-large").iterdir())[: a.small]:  # the same first patients
            (data_small / path.name).write_bytes(path.read_bytes())
        for n in (a.small, a.large):
            (proj / f"test_plain_{n}.py").write_text(
                "import pytest\n\n"
                f"@pytest.mark.parametrize('x', [f'patient-{{i:05d}}-0000-0000-0000-000000000000' for i in range({n})])\n"
                "def test_plain(x):\n    pass\n")

        sizes = [(a.small, data_small), (a.large, proj / "data-large")]
        own: dict[int, list[int]] = {a.small: [], a.large: []}
        plain: dict[int, list[int]] = {a.small: [], a.large: []}
        walls: dict[int, float] = {}
        outcomes: dict[int, dict] = {}
        jobs = [("eval", n, d) for n, d in sizes] + [("plain", n, None) for n, _ in sizes]
        for r in range(a.rounds):
            for kind, n, data in jobs[r % len(jobs):] + jobs[:r % len(jobs)]:
                if kind == "plain":
                    run = run_pytest(proj, [f"test_plain_{n}.py", "-p", "no:groundeval"], label=f"plain {n}",
                                     own_rss=True)
                    plain[n].append(run.own_rss)
                    print(f"    round {r + 1}/{a.rounds}  plain {n:>6} items  own peak RSS {mib(run.own_rss)}", flush=True)
                    continue
                shutil.rmtree(proj / ".groundeval", ignore_errors=True)  # cold: no stored bundle verdicts
                record_path = proj / f"record-{n}.json"
                # rc 1 is fine: some cases may fail (a finding of the agent, not of the harness)
                run = run_pytest(proj, ["test_extraction.py", f"--data-dir={data}", f"--agent={a.agent}",
                                        f"--run-record={record_path}"], label=f"{n} cases", ok=(0, 1), own_rss=True)
                got = expect_cases(read_record(record_path), f"{n} cases", n)
                if got.get("error"):  # an errored case did not do a case's work: what it keeps is not a case's
                    raise BenchFailure(f"run '{n} cases': {got['error']} cases errored ({dict(got)}); "
                                       f"the figure would not be a case's memory")
                outcomes[n] = dict(got)
                record_path.unlink()
                record_path.with_suffix(".jsonl").unlink(missing_ok=True)
                own[n].append(run.own_rss)
                walls[n] = run.wall
                print(f"    round {r + 1}/{a.rounds}  groundeval {n:>6} cases  own peak RSS {mib(run.own_rss)}  "
                      f"wall {run.wall:.1f} s", flush=True)

    rss = {n: median(v) for n, v in own.items()}
    prss = {n: median(v) for n, v in plain.items()}
    extra = a.large - a.small
    per_case = (rss[a.large] - rss[a.small]) / extra
    plain_per = (prss[a.large] - prss[a.small]) / extra
    print()
    table(["run", "own peak RSS (median)", "outcomes"],
          [[f"groundeval {n} cases ({a.agent})", mib(rss[n]), " ".join(f"{k}={v}" for k, v in sorted(outcomes[n].items()))]
           for n in (a.small, a.large)]
          + [[f"plain pytest {n} items", mib(prss[n]), ""] for n in (a.small, a.large)])
    print(f"\nplain pytest's own growth: {plain_per / 1024:.1f} KiB per item (reference, no goal; each child's own "
          f"peak: {mib(prss[a.small])} and {mib(prss[a.large])})")
    goal(f"memory per case at {a.large:,} cases, (own peak RSS({a.large}) - RSS({a.small})) / {extra}: "
         f"{per_case / 1024:.1f} KiB vs the goal's {GOAL_KIB:g} KiB", per_case / 1024 / GOAL_KIB, 1.0)


if __name__ == "__main__":
    main()
