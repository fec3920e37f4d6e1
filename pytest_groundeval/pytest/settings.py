"""The session's settings, parsed once from the options (``pytest/options.py``) into a frozen
:class:`Settings`. A module of its own, imported when groundeval is set up for a session: a
pytest run with no eval item does not pay for building the class (a dataclass of 30 fields,
about a millisecond).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import pytest

from pytest_groundeval.pytest.options import BATCH_WAIT, DEFAULT_AGENT_TIMEOUT, RUNS_DIR

if TYPE_CHECKING:  # imported where Settings are made
    from pytest_groundeval.agents.spec import AgentSpec
    from pytest_groundeval.run.calls import CallPolicy
    from pytest_groundeval.reporting.gate import Threshold


def _task_path(config: pytest.Config, task: Any) -> Path:
    """The command-line value is relative to the current folder; the ini value to the
    rootdir; the default to groundeval's packaged data (built-in suites) or the rootdir."""
    given = config.getoption(task.source.dest)
    ini = config.getini(task.source.ini)
    if given:
        path = Path(given)
        return path if path.is_absolute() else Path.cwd() / path
    if ini:
        path = Path(ini)
        return path if path.is_absolute() else config.rootpath / path
    if task.source.packaged:
        from pytest_groundeval.tasks.resources import data_path

        return data_path(task.source.default)
    return config.rootpath / task.source.default


def _runs_dir(config: pytest.Config) -> Path:
    """``--groundeval-runs-dir`` (relative to the current folder), else ``.groundeval/runs``
    under the rootdir."""
    given = config.getoption("groundeval_runs_dir")
    return Path(given).absolute() if given else config.rootpath / RUNS_DIR


MAX_CONCURRENCY = 256
MAX_RETRIES = 20
MAX_REPEAT = 1000


def _check_values(opt: Any) -> None:
    """Option values that cannot mean anything are usage errors at start, never clamped."""
    def bad(flag: str, value: Any, why: str) -> None:
        raise pytest.UsageError(f"groundeval: {flag} {value!r}: {why}")

    def finite(x: Any) -> bool:
        return isinstance(x, (int, float)) and math.isfinite(x)

    n = opt("groundeval_concurrency")
    if n is not None and not 1 <= n <= MAX_CONCURRENCY:
        bad("--concurrency", n, f"must be between 1 and {MAX_CONCURRENCY}")
    cost = opt("groundeval_max_cost")
    if cost is not None and not (finite(cost) and cost > 0):
        bad("--max-cost", cost, "must be a positive number of USD")
    deadline = opt("groundeval_case_deadline")
    if deadline is not None and not (finite(deadline) and deadline > 0):
        bad("--case-deadline", deadline, "must be a positive number of seconds")
    timeout = opt("groundeval_agent_timeout")
    if timeout is not None and not (finite(timeout) and timeout > 0):
        bad("--agent-timeout", timeout, "must be a positive number of seconds")
    tokens = opt("groundeval_max_tokens")
    if tokens is not None and tokens < 1:
        bad("--model-max-tokens", tokens, "must be 1 or more")
    if opt("groundeval_max_consecutive_errors") < 0:
        bad("--max-consecutive-errors", opt("groundeval_max_consecutive_errors"), "must be 0 (never stop) or more")
    limit = opt("groundeval_limit")
    if limit is not None and limit < 1:
        bad("--groundeval-limit", limit, "must be 1 or more (the cases of each task to run)")
    repeat = opt("groundeval_repeat")
    if not 1 <= repeat <= MAX_REPEAT:
        bad("--repeat", repeat, f"must be between 1 and {MAX_REPEAT}")
    poll = opt("groundeval_batch_poll")
    if not (finite(poll) and poll > 0):
        bad("--batch-poll", poll, "must be a positive number of seconds")
    retries = opt("groundeval_retries")
    if not 0 <= retries <= MAX_RETRIES:
        bad("--agent-retries", retries, f"must be between 0 and {MAX_RETRIES}")
    for flag, dest in (("--agent-retry-delay", "groundeval_retry_base_delay"),
                       ("--agent-max-retry-after", "groundeval_max_retry_after")):
        value = opt(dest)
        if not (finite(value) and value >= 0):
            bad(flag, value, "must be a number of seconds, 0 or more")


@dataclass(frozen=True)
class Settings:
    agent: AgentSpec
    policy: CallPolicy
    concurrency: int | None
    max_cost: float | None
    resume: str | None
    rescore: str | None
    run_record: Path | None
    runs_dir: Path
    rootdir: Path
    thresholds: tuple[Threshold, ...]
    task_paths: Mapping[str, Path]
    is_worker: bool
    worker_count: int
    max_consecutive_errors: int = 5
    preflight: bool = True
    selection: Mapping[str, Any] = field(default_factory=dict)
    shard: tuple[int, int] | None = None  # --groundeval-shard K/N
    repeat: int = 1  # --repeat N
    html_report: Path | None = None  # --groundeval-html PATH (default: beside the record)
    html: bool = True  # --no-groundeval-html: False
    require_grounded: bool = False  # --require-grounded
    spend_file: Path | None = None  # an xdist worker under --max-cost: the session's shared spend (spend.py)
    judge_models: tuple[str, ...] = ()  # --judge-model (repeatable): the jury of tasks with judged items
    judge_base_url: str | None = None  # --judge-base-url
    judge_calibrate: str | None = None  # --judge-calibrate [PATH] ("default": the task's bundled set)
    trust_stored: bool = False  # --trust-stored: --resume keeps stored results that do not re-derive
    batch: bool = False  # --batch: the session's cases as one Message Batch (run/batch.py)
    batch_poll: float = 30.0  # --batch-poll SECONDS

    @classmethod
    def from_config(cls, config: pytest.Config, tasks: Mapping[str, Any]) -> "Settings":
        from pytest_groundeval.agents.spec import AgentSpec
        from pytest_groundeval.run.calls import CallPolicy
        from pytest_groundeval.reporting.gate import parse_threshold
        from pytest_groundeval.pytest.shard import parse_shard

        opt = config.getoption
        name = opt("groundeval_agent") or config.getini("groundeval_agent")
        batch = bool(opt("groundeval_batch"))
        # a batch answers within 24 hours: a call waits for it that long unless told otherwise
        timeout = opt("groundeval_agent_timeout") or (BATCH_WAIT if batch else DEFAULT_AGENT_TIMEOUT)
        cache_dir = opt("groundeval_model_cache_dir")
        resume, rescore = opt("groundeval_resume"), opt("groundeval_rescore")
        if resume and rescore:
            raise pytest.UsageError("groundeval: --resume and --rescore cannot be combined")
        thresholds = []
        given = [(text, "ini") for text in config.getini("groundeval_thresholds")]
        given += [(text, "option") for text in opt("groundeval_thresholds")]
        for text, origin in given:
            try:
                thresholds.append(parse_threshold(text, tasks, origin, repeat=opt("groundeval_repeat") or 1))
            except ValueError as e:
                raise pytest.UsageError(f"groundeval: {e}") from None
        _check_values(opt)
        shard = None
        if opt("groundeval_shard") is not None:
            try:
                shard = parse_shard(opt("groundeval_shard"))
            except ValueError as e:
                raise pytest.UsageError(f"groundeval: --groundeval-shard {e}") from None
        workerinput = getattr(config, "workerinput", None)
        record = opt("groundeval_run_record")
        return cls(
            agent=AgentSpec(
                name=name, model=opt("groundeval_model"), base_url=opt("groundeval_base_url"), timeout=timeout,
                cache_mode=opt("groundeval_model_cache"), in_process=opt("groundeval_agent_in_process"),
                prompt_cache=not opt("groundeval_no_prompt_cache"),
                max_tokens=opt("groundeval_max_tokens"), tool_choice=opt("groundeval_tool_choice"),
                cache_dir=str(Path(cache_dir) if cache_dir else config.rootpath / ".groundeval" / "cache"),
            ),
            policy=CallPolicy(timeout=timeout, max_attempts=opt("groundeval_retries") + 1,
                              base_delay=opt("groundeval_retry_base_delay"),
                              max_retry_after=opt("groundeval_max_retry_after"),
                              case_deadline=max(opt("groundeval_case_deadline"), timeout) if batch
                              else opt("groundeval_case_deadline")),
            concurrency=opt("groundeval_concurrency"),
            max_cost=opt("groundeval_max_cost"),
            resume=resume,
            rescore=rescore,
            run_record=Path(record).absolute() if record else None,  # fixed now: an agent's chdir moves nothing
            runs_dir=_runs_dir(config),
            rootdir=config.rootpath,
            thresholds=tuple(thresholds),
            task_paths={n: _task_path(config, t) for n, t in tasks.items()},
            is_worker=workerinput is not None,
            max_consecutive_errors=opt("groundeval_max_consecutive_errors"),
            preflight=not opt("groundeval_no_preflight"),
            worker_count=int(workerinput.get("workercount", 1)) if workerinput else 1,
            selection={
                "keyword": opt("keyword", None) or None,
                "markexpr": opt("markexpr", None) or None,
                "numprocesses": opt("numprocesses", None),
                "limit": opt("groundeval_limit"),
                "args": list(config.args),
            },
            shard=shard,
            repeat=opt("groundeval_repeat"),
            html_report=Path(opt("groundeval_html")) if opt("groundeval_html") else None,
            html=not opt("groundeval_no_html"),
            require_grounded=bool(opt("groundeval_require_grounded")),
            spend_file=Path(workerinput["groundeval_spend"]) if workerinput and workerinput.get("groundeval_spend")
            else None,
            judge_models=tuple(opt("groundeval_judge_models") or ()),
            judge_base_url=opt("groundeval_judge_base_url"),
            judge_calibrate=opt("groundeval_judge_calibrate"),
            trust_stored=opt("groundeval_trust_stored"),
            batch=batch,
            batch_poll=opt("groundeval_batch_poll"),
        )

    @property
    def mode(self) -> str:
        return "resume" if self.resume else "rescore" if self.rescore else "run"

    @property
    def stored_spec(self) -> str | None:
        return self.resume or self.rescore

    def default_concurrency(self, agent: Any = None) -> int:
        if self.concurrency is not None:
            return self.concurrency
        return getattr(agent, "concurrency", None) or (8 if self.agent.is_live else 1)

    def record_options(self, tasks: Mapping[str, Any], concurrency: int, stored_run_id: str | None) -> dict[str, Any]:
        opts: dict[str, Any] = {name: task.options for name, task in tasks.items()}
        opts.update({
            "base_url": self.agent.base_url,
            "agent_timeout": self.agent.timeout,
            "max_tokens": self.agent.effective_max_tokens,
            "tool_choice": self.agent.tool_choice if self.agent.base_url or (self.agent.model or "").startswith("openai:")
            else None,
            "thresholds": [f"{t.label}={t.value}" for t in self.thresholds],
            **{k: v for k, v in self.selection.items() if k not in ("args", "limit")},  # (limit: completeness.selection)
            "concurrency": concurrency,
            "retries": self.policy.max_attempts - 1,
            "max_cost_usd": self.max_cost,
            "model_cache": self.agent.cache_mode,
            "batch": self.batch,
            "prompt_cache": self.agent.prompt_cache,
            "resumed_from": stored_run_id if self.mode == "resume" else None,
            "rescored_from": stored_run_id if self.mode == "rescore" else None,
            "shard": f"{self.shard[0]}/{self.shard[1]}" if self.shard else None,
            "repeat": self.repeat,
            "require_grounded": self.require_grounded,
            "args": self.selection.get("args", []),
        })
        return opts
