"""``--batch``: when the items are collected, the session's cases are submitted as one Message
Batch (``run/batch.py``); each item's call then waits for its result.

``--agent=claude`` (Anthropic's Message Batches) and ``--agent=chat`` on an OpenAI model
(OpenAI's Batch API) are batched: each makes one call per case, so every case of the session
is one batch request. A tool-using agent's case is several calls that each depend on
the last tool result, which a batch cannot answer: ``--batch`` with any other agent is a
usage error (run those without it), and so is ``--batch`` with xdist's ``-n`` (one batch per
session, submitted by one process). A case of a task that starts a FHIR server per case
(labs, orders) names that server in its prompt, and the server lives only for the case's call:
those cases are called directly, at the list price. With ``--max-cost`` the batch holds the
requests that fit it at the batch price (:func:`estimate`); a case left out is refused by the
budget before its call (``Budget.refuse``): not run, kind ``budget``, as any case --max-cost keeps.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import pytest

from pytest_groundeval.pytest.items import case_ref

def batch_problem(settings: Any, config: pytest.Config) -> str | None:
    """Why ``--batch`` cannot run this session, else None."""
    if not settings.batch or settings.mode == "rescore":
        return None
    spec = settings.agent
    openai = spec.name == "chat" and (bool(spec.base_url) or (spec.model or "").startswith("openai:"))
    if spec.name != "claude" and not openai:
        return (f"--batch sends single-call cases as one batch: --agent=claude (Message Batches) or --agent=chat on "
                f"an OpenAI model (the Batch API) only; --agent={spec.name}"
                f"{' --model ' + spec.model if spec.model else ''} makes several calls per case (or its own calls), "
                "which a batch cannot answer; run it without --batch")
    if getattr(config.option, "numprocesses", None) or getattr(config, "workerinput", None) is not None:
        return "--batch submits one batch per session from one process: drop -n (the batch runs in parallel itself)"
    return None


def estimate(request: dict[str, Any], model: str | None) -> float:
    """A request's most likely cost at the batch price, before it is sent: its body's
    characters / 4 as input tokens at the input price, and its ``max_tokens`` at the output
    price, halved (0 for an unpriced model: ``--max-cost`` refuses those at start)."""
    import json

    from pytest_groundeval.run.batch import BATCH_DISCOUNT
    from pytest_groundeval.run.usage import price_for

    price = price_for(model)
    if price is None:
        return 0.0
    tokens_in = len(json.dumps(request)) / 4
    full = tokens_in * price["input_per_mtok"] + request.get("max_tokens", 0) * price["output_per_mtok"]
    return BATCH_DISCOUNT * full / 1e6


class BatchSubmitter:
    def __init__(self, evaluator: Any, config: pytest.Config) -> None:
        self.evaluator = evaluator
        self.config = config
        self.batches: Any = None
        self._lock = threading.Lock()

    def progress(self, line: str) -> None:
        """A line on the terminal, from the poller's thread while an item waits: around the
        output capture, as pytest's live logging writes (``global_and_fixture_disabled``)."""
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        capman = self.config.pluginmanager.get_plugin("capturemanager")
        if tr is None:
            return
        with self._lock, (capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()):
            tr.ensure_newline()
            tr.write_line(line)

    def journal(self, info: dict[str, Any]) -> None:
        from pytest_groundeval.pytest.keys import REPORTER

        reporter = self.config.stash.get(REPORTER, None)
        if reporter is not None:
            reporter.journal_batch(info)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        from pytest_groundeval.run.batch import MessageBatches, OpenAIBatches, custom_id
        from pytest_groundeval.run.fhircase import uses_server
        from pytest_groundeval.run.runner import load_case
        from pytest_groundeval.store.journal import journal_batches

        ev = self.evaluator
        # a task with a FHIR server per case names it in the prompt: the server lives only for
        # the case's call, so those cases are called directly (at the list price)
        refs = [ref for ref in map(case_ref, session.items) if ref is not None
                and not uses_server(ev.tasks[ref.task]) and ev.needs_call(ref)]
        if not refs:
            return
        agent = ev.get_agent()
        from pytest_groundeval.run.usage import call_floor

        if getattr(agent, "batchable", False):  # chat on an OpenAI model: the Batch API, the same client
            self.batches = OpenAIBatches(agent.chat_model.root_client, poll_s=ev.settings.batch_poll,
                                         progress=self.progress, journal=self.journal)
        else:
            self.batches = MessageBatches(agent.client, poll_s=ev.settings.batch_poll, progress=self.progress,
                                          journal=self.journal)
        agent.batches = self.batches
        ev.budget.floor = call_floor(agent)  # a call's least cost, at the batch price
        if ev.stored is not None and ev.settings.mode == "resume":
            for line in journal_batches(Path(ev.stored.path)):
                self.batches.attach(line["id"], [str(c) for c in line["custom_ids"]])
        requests: dict[str, dict[str, Any]] = {}
        room = ev.settings.max_cost
        for ref in refs:
            case, _ = load_case(ev.tasks[ref.task], ref)
            if case is None:
                continue  # its item errors as a case error, without a call
            request = agent.request(case.prompt)
            cid = custom_id(request, ref.repeat)
            if room is not None and not self.batches.holds(cid):
                cost = estimate(request, agent.model)
                if cost > room:  # not submitted: its case is not run, as --max-cost keeps any case
                    ev.budget.refuse(ref.key, f"--max-cost {ev.settings.max_cost:g} USD has no room for it in the "
                                              f"batch (about {cost:.4f} USD at the batch price, {room:.4f} left)")
                    continue
                room -= cost
            requests[cid] = request
        self.batches.submit(requests)
        self.batches.start()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.batches is not None:
            self.batches.close()


def register_batch(config: pytest.Config, evaluator: Any) -> None:
    problem = batch_problem(evaluator.settings, config)
    if problem:
        raise pytest.UsageError(f"groundeval: {problem}")
    if evaluator.settings.batch and evaluator.settings.mode != "rescore":
        config.pluginmanager.register(BatchSubmitter(evaluator, config), "groundeval-batch")
