"""Anthropic prompt caching (issue 31 item 2): ``--agent=claude`` sends the patient's record
first, with ``cache_control`` breakpoints after it and at the end of the message; the same
patient's cases run together; a loopback Messages API on 127.0.0.1 that bills the requests as
the API documents (``tests/anthropic_loopback.py``) shows the first request of a record
writing it and every later one (another task, another case, a repeat) reading it, and the
record prices the writes and reads at their own rates. ``--no-prompt-cache`` sends the
prompt as one string and nothing is cached."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from anthropic_loopback import AnthropicLoopback, PromptCache, minimum_cacheable, tokens
from conftest import ROOT

pytest.importorskip("anthropic")

from pytest_groundeval.run.prompt_cache import (RECORD_END, RECORD_HEADER, patient_key, record_first,  # noqa: E402
                                                split_record, user_content)
from pytest_groundeval.run.usage import cost_usd  # noqa: E402
from pytest_groundeval.store.record import validate_record  # noqa: E402

FIXTURES = ROOT / "fixtures"
PATIENTS = ("Adalberto_Hartmann_44ec4447-9e2c-4eb9-bd4f-0bdb416b806e",
            "Chiquita638_Vandervort697_269c9001-961e-5c04-c250-442ec7c276c5")
MODEL = "claude-sonnet-4-6"  # minimum cacheable length 1024 tokens


# ------------------------------------------------------------------ the prompt's layout
def test_a_record_first_prompt_splits_into_the_record_and_the_rest_and_nothing_else_does():
    prompt = record_first('{"resourceType": "Bundle"}', "List the medications.")
    head, rest = split_record(prompt)
    assert head + rest == prompt and head.startswith(RECORD_HEADER) and head.endswith(RECORD_END)
    assert rest == "List the medications."
    assert split_record("Bundle:\n{}\n\nList the medications.") is None  # not the layout: one block
    blocks = user_content(prompt, cached=True)
    assert "".join(b["text"] for b in blocks) == prompt  # the model is sent the same text
    assert [b["cache_control"] for b in blocks] == [{"type": "ephemeral"}] * 2
    assert user_content(prompt, cached=False) == prompt


def test_patient_keys_of_the_bundled_suites_ids():
    assert patient_key(PATIENTS[0]) == patient_key("Adalberto_Hartmann_44ec4447_b") == "Adalberto_Hartmann_44ec4447"
    assert patient_key("Adalberto_Hartmann_44ec4447_latest_egfr") == "Adalberto_Hartmann_44ec4447"
    assert patient_key(PATIENTS[0]) != patient_key(PATIENTS[1])
    assert patient_key("my-case") == "my-case"  # no patient id in it: a group of its own


# ------------------------------------------------------------------ the loopback server's billing
def _send(api: AnthropicLoopback, content: Any, model: str = MODEL) -> Any:
    import anthropic

    client = anthropic.Anthropic(base_url=api.url, api_key="test", max_retries=0)
    return client.messages.create(model=model, max_tokens=100, messages=[{"role": "user", "content": content}])


def test_the_loopback_server_writes_a_marked_prefix_once_then_reads_it_until_its_ttl_ends():
    now = [0.0]
    record = "x" * (4 * 2000)  # 2,000 tokens: above Sonnet 4.6's minimum
    blocks = user_content(record_first(record, "Question A"), cached=True)
    with AnthropicLoopback(clock=lambda: now[0]) as api:
        first = _send(api, blocks).usage
        assert first.cache_read_input_tokens == 0 and first.cache_creation_input_tokens >= 2000
        again = _send(api, blocks).usage  # the same prompt: all of it read
        assert again.cache_read_input_tokens == first.cache_creation_input_tokens
        assert again.cache_creation_input_tokens == 0
        other = _send(api, user_content(record_first(record, "Question B, longer"), cached=True)).usage
        head = tokens("<user>") + tokens(split_record(record_first(record, ""))[0])
        assert other.cache_read_input_tokens == head  # the record's prefix read; the new tail written
        now[0] += 301  # past the 5-minute TTL: written again
        late = _send(api, blocks).usage
        assert late.cache_read_input_tokens == 0 and late.cache_creation_input_tokens > 0
        plain = _send(api, record_first(record, "Question A")).usage  # no breakpoint: nothing cached
        assert plain.cache_read_input_tokens == plain.cache_creation_input_tokens == 0
        assert abs(plain.input_tokens - (first.input_tokens + first.cache_creation_input_tokens)) <= 2  # (rounding per part)


def test_a_prefix_below_the_models_minimum_is_neither_written_nor_read():
    short = user_content(record_first("y" * 400, "Question"), cached=True)
    with AnthropicLoopback() as api:
        for _ in range(2):
            usage = _send(api, short).usage
            assert usage.cache_read_input_tokens == usage.cache_creation_input_tokens == 0
    assert minimum_cacheable("claude-opus-4-8") == 4096 and minimum_cacheable(MODEL) == 1024


def test_more_than_four_breakpoints_are_refused_as_the_api_does():
    import anthropic

    blocks = [{"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}} for i in range(5)]
    with AnthropicLoopback() as api, pytest.raises(anthropic.BadRequestError, match="maximum of 4"):
        _send(api, blocks)
    assert PromptCache().usage({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})["input_tokens"] > 0


# ------------------------------------------------------------------ a session
@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """Two patients: their bundles (extraction) and their reconciliation cases."""
    synthea = pytester.mkdir("synthea")
    recon = pytester.mkdir("reconciliation")
    for stem in PATIENTS:
        shutil.copy(FIXTURES / "synthea" / f"{stem}.json", synthea / f"{stem}.json")
        for case in sorted((FIXTURES / "reconciliation").glob(f"{patient_key(stem)}_*.json")):
            shutil.copy(case, recon / case.name)
    return pytester


def _run(p: pytest.Pytester, api: AnthropicLoopback, monkeypatch: pytest.MonkeyPatch, *args: str) -> dict[str, Any]:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    result = p.runpytest_subprocess(
        str(ROOT / "evals"), "-m", "extraction or reconciliation", "--data-dir", "synthea",
        "--reconciliation-cases", "reconciliation", "--agent=claude", "--model", MODEL, "--repeat", "2",
        "--run-record", "record.json", "-p", "no:cacheprovider", "-p", "no:randomly", "-v",
        "--rootdir", str(p.path), *args)
    rec = json.loads((p.path / "record.json").read_text())
    assert validate_record(rec) == [], result.stdout.str()[-3000:]
    rec["_order"] = [line.split("::", 1)[1].split(" ", 1)[0] for line in result.stdout.lines  # test_x[<id>[rK]]
                     if "::test_" in line and (" PASSED" in line or " FAILED" in line)]
    rec["_order"] = [item.split("[", 1)[1][:-1] for item in rec["_order"]]  # <id>[rK], in the order run
    rec["_lines"] = result.stdout.lines
    return rec


def _record_of(body: dict[str, Any]) -> str | None:
    content = body["messages"][0]["content"]
    text = content if isinstance(content, str) else "".join(b["text"] for b in content)
    parts = split_record(text)
    return parts[0] if parts else None


def test_a_patients_cases_read_its_record_from_the_cache_after_the_first_writes_it(project, monkeypatch):
    with AnthropicLoopback(latency=0.5) as api:  # a model's time: 8 calls in flight overlap
        rec = _run(project, api, monkeypatch)
        sent = [body for path, body in api.requests if path.endswith("/v1/messages")]
    cases = rec["cases"]
    assert len(cases) == len(sent) == 2 * (2 + 6)  # 2 patients x (1 extraction + 3 reconciliation) x 2 repeats
    assert rec["options"]["prompt_cache"] is True
    for body in sent:  # every request: the record, then the rest, each block a breakpoint
        assert [b.get("cache_control") for b in body["messages"][0]["content"]] == [{"type": "ephemeral"}] * 2
    # a patient's items run together (the collection order was task by task)
    order = [patient_key(item) for item in rec["_order"]]
    assert len(order) == 16 and order == sorted(order, key=order.index)
    assert [o for i, o in enumerate(order) if i == 0 or order[i - 1] != o] == [patient_key(p) for p in PATIENTS]
    # each patient's record is written once, by its first request, and read by the 7 others
    files = {patient_key(stem): (FIXTURES / "synthea" / f"{stem}.json").read_text() for stem in PATIENTS}
    record_tokens = {key: tokens("<user>") + tokens(_record_of(body)) for body in sent
                     for key, text in files.items() if text in _record_of(body)}
    by_patient: dict[str, list[dict[str, Any]]] = {}
    for c in cases:
        by_patient.setdefault(patient_key(c["case_id"]), []).append(c["usage"])
    for key, usages in by_patient.items():
        writers = [u for u in usages if u["cache_read_input_tokens"] == 0]
        assert len(writers) == 1 and writers[0]["cache_creation_input_tokens"] > record_tokens[key], (key, usages)
        assert all(u["cache_read_input_tokens"] >= record_tokens[key] for u in usages if u is not writers[0])
        assert all(u["input_tokens"] == 0 for u in usages)  # all of every prompt is behind a breakpoint

    assert len(record_tokens) == 2
    # the cost is the table's prices of the uncached input, the writes and the reads
    for c in cases:
        assert c["cost_usd"] == pytest.approx(cost_usd(MODEL, c["usage"]))
        u = c["usage"]
        assert c["cost_usd"] == pytest.approx((u["input_tokens"] * 3 + u["output_tokens"] * 15 + u[
            "cache_creation_input_tokens"] * 3.75 + u["cache_read_input_tokens"] * 0.3) / 1e6)


def test_no_prompt_cache_sends_one_string_and_pays_full_input_for_every_repeat(project, monkeypatch):
    with AnthropicLoopback() as cached_api:
        cached = _run(project, cached_api, monkeypatch)
    with AnthropicLoopback() as api:
        rec = _run(project, api, monkeypatch, "--no-prompt-cache")
        sent = [body for path, body in api.requests if path.endswith("/v1/messages")]
    assert rec["options"]["prompt_cache"] is False
    assert all(isinstance(b["messages"][0]["content"], str) for b in sent)
    assert all(not c["usage"].get("cache_read_input_tokens") and not c["usage"].get("cache_creation_input_tokens")
               for c in rec["cases"])
    assert rec["_order"][:2] == [f"{PATIENTS[0]}[r1]", f"{PATIENTS[0]}[r2]"]  # collection order kept: task by task
    assert rec["_order"][2] == f"{PATIENTS[1]}[r1]"
    spent = sum(c["cost_usd"] for c in rec["cases"])
    assert sum(c["cost_usd"] for c in cached["cases"]) < 0.5 * spent
    def outcomes(r: dict[str, Any]) -> dict[tuple, str]:
        return {(c["task"], c["case_id"], c["repeat"]): c["outcome"] for c in r["cases"]}

    assert outcomes(rec) == outcomes(cached)  # the same text is sent: the same answers


def test_calls_that_start_together_on_one_record_let_the_first_write_it_and_the_others_read_it():
    """Four repeats in flight at once (the prefetcher's 8 threads): the first request of the
    record goes, the others wait for its answer and read what it wrote."""
    import threading

    from pytest_groundeval.agents.claude import ClaudeAgent

    record = json.dumps({"resourceType": "Bundle", "entry": [], "pad": "z" * 8000})
    prompt = record_first(record, "List the active medications.")
    start = threading.Barrier(4)
    with AnthropicLoopback(latency=0.3) as api:
        import anthropic

        agent = ClaudeAgent(model=MODEL, client=anthropic.Anthropic(base_url=api.url, api_key="k", max_retries=0))
        usages: list[dict[str, Any]] = []

        def call() -> None:
            start.wait()
            usages.append(agent.run(prompt).usage)

        threads = [threading.Thread(target=call) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(u["cache_read_input_tokens"] > 0 for u in usages) == [False, True, True, True], usages
    assert sum(u["cache_creation_input_tokens"] > 0 for u in usages) == 1


# ------------------------------------------------------------------ langgraph on an Anthropic model
def test_langgraph_on_anthropic_caches_its_system_prompt_and_records_cache_tokens_apart(monkeypatch):
    """langchain-anthropic's caching middleware marks the system prompt; the second run reads
    it; the usage keeps LangChain's cache reads and writes out of ``input_tokens``."""
    pytest.importorskip("langchain_anthropic")
    from pytest_groundeval.agents.langgraph_agent import LangGraphAgent

    system = "You answer in JSON. " + "Background the answer must respect. " * 300  # ~2,700 tokens
    with AnthropicLoopback() as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        agent = LangGraphAgent(model=f"anthropic:{MODEL}", system_prompt=system, prompt_cache=True)
        first, second = agent.run("List the medications.").usage, agent.run("List the medications.").usage
        off = LangGraphAgent(model=f"anthropic:{MODEL}", system_prompt=system).run("List them.").usage
        sent = [body for path, body in api.requests if path.endswith("/v1/messages")]
    assert any("cache_control" in b for b in sent[0]["system"]) if isinstance(sent[0]["system"], list) else False
    assert first["cache_creation_input_tokens"] >= tokens(system) and "cache_read_input_tokens" in first
    assert second["cache_read_input_tokens"] >= tokens(system) and second["cache_creation_input_tokens"] == 0
    assert second["input_tokens"] < 100  # the cached part is not counted again as input
    assert "cache_read_input_tokens" not in off and off["input_tokens"] >= tokens(system)  # not asked: not cached
    assert isinstance(sent[-1]["system"], str) or not any("cache_control" in b for b in sent[-1]["system"])


def test_under_xdist_a_patients_record_is_written_at_most_once_per_worker(project, monkeypatch):
    """-n 2 --dist loadgroup: the items carry xdist_group marks named after their patient. (With
    pytest 9.2 and pytest-xdist 3.8 the grouping itself does not happen: xdist tags a grouped
    item by setting ``item._nodeid``, which pytest 9 no longer reads; the prompt cache lives on
    the API's side, so a second worker reads it too, or writes it once more.)"""
    pytest.importorskip("xdist")
    with AnthropicLoopback(latency=0.2) as api:
        rec = _run(project, api, monkeypatch, "-n", "2", "--dist", "loadgroup")
    assert len(rec["cases"]) == 16 and all(c["outcome"] in ("passed", "failed") for c in rec["cases"])
    workers: dict[str, set[str]] = {}
    for line in rec["_lines"]:
        if "::test_" in line and line.startswith("[gw"):
            item = line.split("::", 1)[1].split("[", 1)[1]  # <case id>[rK]]
            workers.setdefault(patient_key(item), set()).add(line.split("]", 1)[0])
    assert len(workers) == 2
    for key, ran_on in workers.items():
        usages = [c["usage"] for c in rec["cases"] if patient_key(c["case_id"]) == key]
        writers = sum(u["cache_read_input_tokens"] == 0 for u in usages)
        assert 1 <= writers <= len(ran_on), (key, ran_on, usages)  # one writer per worker at most (PrefixGate)
        assert sum(u["cache_read_input_tokens"] > 0 for u in usages) >= len(usages) - len(ran_on)
