"""The record's write, side by side: ``store.write`` (the typed record dumped whole) against
the splice it replaced (the cases' JSON as reported, spliced into the dumped head), and
``store.read`` against a plain ``orjson.loads``, on N cases (copies of a real run's cases).

    uv run python scripts/bench_record_write.py RUN.json [--cases 5000] [--repeat 5]

RUN.json: any record (``uv run pytest evals --run-record /tmp/evals.json`` makes one).
Prints the best time of each and the ratio new / old.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import orjson

from pytest_groundeval.model import RunRecord
from pytest_groundeval.store import read, write
from pytest_groundeval.store.files import record_bytes
from pytest_groundeval.store.record import write_json_atomic
from pytest_groundeval.store.redact import redact_json


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("record", type=Path)
    ap.add_argument("--cases", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    base = read(args.record)
    assert isinstance(base, RunRecord), "give a run record"
    cases = [c.model_copy(update={"case_id": f"{c.case_id}-{i}"})
             for i in range(args.cases // len(base.cases) + 1) for c in base.cases][:args.cases]
    record = base.model_copy(update={"cases": cases})
    blobs = [orjson.dumps(c.model_dump(mode="json")) for c in cases]  # as the reporter held them
    out = Path(tempfile.mkdtemp()) / "run.json"

    def old_write() -> None:
        head = record.model_dump(mode="json", exclude={"cases"})
        payload = {k: ([orjson.loads(b) for b in blobs] if k == "cases" else head[k]) for k in RunRecord.model_fields}
        write_json_atomic(out, redact_json(orjson.dumps(payload, default=str, option=orjson.OPT_INDENT_2) + b"\n"))

    def new_write() -> None:
        write(record, out)

    assert orjson.loads(record_bytes(record)) == orjson.loads(
        orjson.dumps({**record.model_dump(mode="json"), "cases": [orjson.loads(b) for b in blobs]}))
    w_old, w_new = best(old_write, args.repeat), best(new_write, args.repeat)
    r_old, r_new = best(lambda: orjson.loads(out.read_bytes()), args.repeat), best(lambda: read(out), args.repeat)
    print(f"{len(cases)} cases, {out.stat().st_size / 1e6:.1f} MB")
    print(f"write: splice {w_old * 1000:8.1f} ms   store.write {w_new * 1000:8.1f} ms   ratio {w_new / w_old:.2f}")
    print(f"read:  orjson {r_old * 1000:8.1f} ms   store.read  {r_new * 1000:8.1f} ms   ratio {r_new / r_old:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
