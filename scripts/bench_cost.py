"""What a run of the committed suites costs on Claude: plain, with prompt caching, with
``--batch``, with both (issue 31 item 4).

Each configuration runs ``pytest evals --agent=claude --repeat 3`` (the committed suites whose
cases carry their data in the prompt; ``--tasks`` picks others) in a child process against a fresh
loopback Anthropic Messages API on 127.0.0.1 (``tests/anthropic_loopback.py``). That server
counts the tokens of the requests the harness really sends (one token per 4 characters of
each part) and applies the documented cache rules (breakpoints, the model's minimum cacheable
length, a 5-minute TTL, an entry readable once its writer is answered); the bill below is the
server's own (its usage, priced at the list prices of ``prices.json``, batch requests at half
price), checked against the cost the run record reports. Goals: caching <= 0.45x plain,
batch <= 0.5x, both <= 0.25x.

    uv run python scripts/bench_cost.py [--model claude-opus-4-8] [--tasks extraction,reconciliation]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the loopback API the tests use

from anthropic_loopback import AnthropicLoopback  # noqa: E402

from pytest_groundeval.run.usage import price_for  # noqa: E402

CONFIGS = {  # name -> extra pytest arguments
    "plain": ["--no-prompt-cache"],
    "caching": [],
    "batch": ["--no-prompt-cache", "--batch", "--batch-poll", "0.2"],
    "caching + batch": ["--batch", "--batch-poll", "0.2"],
}
GOALS = {"caching": 0.45, "batch": 0.5, "caching + batch": 0.25}
# the suites whose cases are one call with the case's data in the prompt (labs and orders name a
# FHIR server started for each case's call: --batch calls them directly, at the list price;
# --tasks adds them)
DEFAULT_TASKS = "extraction,reconciliation,letter,write"


def bill(billed: list[tuple[str, dict[str, int], bool]]) -> dict[str, float]:
    """The server's bill: tokens by kind and their cost at list prices (batch: half)."""
    total = {"requests": 0, "input": 0, "cache_write": 0, "cache_read": 0, "output": 0, "usd": 0.0}
    for model, u, batched in billed:
        price = price_for(model)
        if price is None:
            raise SystemExit(f"bench_cost: model {model} has no list price in prices.json")
        usd = (u["input_tokens"] * price["input_per_mtok"] + u["output_tokens"] * price["output_per_mtok"]
               + u["cache_creation_input_tokens"] * price["cache_write_5m_per_mtok"]
               + u["cache_read_input_tokens"] * price["cache_read_per_mtok"]) / 1e6
        total["usd"] += usd * (0.5 if batched else 1.0)
        total["requests"] += 1
        for key, field in (("input", "input_tokens"), ("cache_write", "cache_creation_input_tokens"),
                           ("cache_read", "cache_read_input_tokens"), ("output", "output_tokens")):
            total[key] += u[field]
    return total


def run(name: str, extra: list[str], args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    record = tmp / f"{name.replace(' + ', '-')}.json"
    markers = " or ".join(args.tasks.split(","))
    with AnthropicLoopback() as api:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "LANGSMITH_", "LANGCHAIN_"))}
        env.update(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="bench-key")
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", str(ROOT / "evals"), "-m", markers, "--agent=claude", "--model", args.model,
             "--repeat", str(args.repeat), "--run-record", str(record), "-p", "no:cacheprovider", "-p", "no:randomly",
             "-q", "--no-header", "-p", "no:langsmith_plugin", "--rootdir", str(tmp), *extra],
            cwd=tmp, env=env, capture_output=True, text=True)
        wall = time.monotonic() - started
        billed = list(api.billed)
    if not record.is_file():
        raise SystemExit(f"bench_cost: the {name} run wrote no record (exit {proc.returncode}):\n{proc.stdout[-3000:]}"
                         f"\n{proc.stderr[-2000:]}")
    rec = json.loads(record.read_text())
    out = bill(billed)
    out.update(name=name, cases=len(rec["cases"]), wall_s=wall, record_usd=rec["usage"]["cost_usd"],
               errors=sum(c["outcome"] == "error" for c in rec["cases"]))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="claude-opus-4-8", help="a model of prices.json (default claude-opus-4-8)")
    parser.add_argument("--tasks", default=DEFAULT_TASKS, help=f"comma-separated suites (default {DEFAULT_TASKS})")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="groundeval-bench-cost-") as tmp:
        for name, extra in CONFIGS.items():
            rows.append(run(name, extra, args, Path(tmp)))
            print(f"  ran {name}: {rows[-1]['cases']} cases in {rows[-1]['wall_s']:.0f} s", file=sys.stderr)
    plain = rows[0]["usd"]
    print(f"\nbench_cost: the committed suites ({args.tasks}) x --repeat {args.repeat}, --agent=claude --model "
          f"{args.model}, on a loopback Messages API billing what it is sent (list prices, batch at half)\n")
    print(f"{'run':<16}{'cases':>6}{'requests':>9}{'input':>11}{'cache write':>12}{'cache read':>12}{'output':>9}"
          f"{'cost USD':>11}{'x plain':>9}{'record USD':>12}")
    for r in rows:
        print(f"{r['name']:<16}{r['cases']:>6}{r['requests']:>9}{r['input']:>11,}{r['cache_write']:>12,}"
              f"{r['cache_read']:>12,}{r['output']:>9,}{r['usd']:>11.4f}{r['usd'] / plain:>9.3f}{r['record_usd']:>12.4f}")
    ok = True
    print()
    for r in rows:
        if abs(r["usd"] - r["record_usd"]) > 1e-4 * max(1.0, r["usd"]) + 1e-6:
            ok = False
            print(f"MISMATCH {r['name']}: the server billed {r['usd']:.6f} USD, the record says {r['record_usd']:.6f}")
        if r["errors"]:
            ok = False
            print(f"ERRORS {r['name']}: {r['errors']} cases ended in an error")
        goal = GOALS.get(r["name"])
        if goal is not None:
            met = round(r["usd"], 6) <= round(goal * plain, 6)  # (sums of floats: compared to the micro-dollar)
            ok &= met
            print(f"goal {r['name']:<16} <= {goal:.2f}x plain: {r['usd'] / plain:.3f}x  {'MET' if met else 'NOT MET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
