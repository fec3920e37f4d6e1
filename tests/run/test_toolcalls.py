"""The harness's tool wrappers (toolcalls.py): what the model sees is unchanged, every call
is recorded with its sequence number and status, error values are marked where the result
comes back, and a closed log takes nothing more."""

from __future__ import annotations

import threading

import pytest
from conftest import SYNTHEA

pytest.importorskip("langchain_core")

from langchain_core.tools import StructuredTool, ToolException  # noqa: E402
from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: E402

from pytest_groundeval.fhir import hc_tools  # noqa: E402
from pytest_groundeval.tasks.write import WriteTask  # noqa: E402
from pytest_groundeval.run.toolcalls import ToolLog, current, harness_tools, is_error_value, observe, observed_tool  # noqa: E402

BUNDLE = next(SYNTHEA.glob("*.json")).read_text()


def _tool_call(name, args, cid="c1"):
    return {"name": name, "args": args, "id": cid, "type": "tool_call"}


def test_a_wrapped_tool_shows_the_model_the_same_spec():
    for tools in (hc_tools.langchain_tools(), hc_tools.langchain_record_tools(BUNDLE),
                  hc_tools.langchain_bundle_tools(BUNDLE)):
        for t in tools:
            assert convert_to_openai_tool(observed_tool(t, ToolLog())) == convert_to_openai_tool(t), t.name


def test_calls_are_recorded_in_order_with_results_and_statuses():
    log = ToolLog()
    lookup, build, _ = (observed_tool(t, log) for t in hc_tools.langchain_tools())
    ok = lookup.invoke(_tool_call("lookup_medication_code", {"query": "ibuprofen 200 mg oral tablet"}),
                       {"metadata": {"langgraph_step": 2}})
    assert ok.status == "success" and "310965" in ok.content  # the model gets what the tool returned
    lookup.invoke(_tool_call("lookup_medication_code", {"query": 310965}, "c2"))  # schema: a string
    build.invoke({"subject": "x", "rxnorm_code": "310965", "display": "d", "status": "active"})  # error value
    calls = log.calls()
    assert [(c["seq"], c["tool"], c["status"]) for c in calls] == [
        (1, "lookup_medication_code", "ok"), (2, "lookup_medication_code", "error"),
        (3, "build_medication_statement", "error")]
    assert calls[0]["step"] == 2 and calls[1]["step"] is None
    assert calls[0]["result"]["matches"][0]["code"] == "310965"
    assert "310965" in str(calls[1]["result"]) and "subject" in calls[2]["result"]["error"]
    assert [(c["started"], c["ended"]) for c in calls] == [(1, 2), (3, 4), (5, 6)]


def test_a_raising_tool_is_recorded_as_raised_and_still_raises():
    def boom(x: str) -> str:
        raise RuntimeError("down")

    def handled(x: str) -> str:
        raise ToolException("bad x")

    log = ToolLog()
    raising = observed_tool(StructuredTool.from_function(boom, name="boom", description="d"), log)
    with pytest.raises(RuntimeError):
        raising.invoke({"x": "1"})
    soft = observed_tool(StructuredTool.from_function(handled, name="soft", description="d", handle_tool_error=True),
                         log)
    assert soft.invoke(_tool_call("soft", {"x": "1"})).status == "error"
    assert [(c["tool"], c["status"]) for c in log.calls()] == [("boom", "raised"), ("soft", "error")]


def test_error_values_are_told_by_structure():
    assert is_error_value({"error": "not found"}) and is_error_value({"query": "q", "matches": [], "error": "x"})
    assert is_error_value({"ok": False, "error": None})
    assert not is_error_value({"matches": [], "error": None}) and not is_error_value({"valid": False, "issues": []})
    assert not is_error_value("error: the word in a text result")


def test_a_closed_log_records_nothing_more_and_an_unfinished_call_stays_unfinished():
    log = ToolLog()
    started = threading.Event()
    release = threading.Event()

    def slow(x: str) -> str:
        started.set()
        release.wait(30)
        return "late"

    tool = observed_tool(StructuredTool.from_function(slow, name="slow", description="d"), log)
    worker = threading.Thread(target=tool.invoke, args=({"x": "1"},))
    worker.start()
    assert started.wait(30)
    log.close()
    release.set()
    worker.join(30)
    tool.invoke({"x": "2"})
    assert [(c["seq"], c["status"], c["ended"]) for c in log.calls()] == [(1, "unfinished", None)]


def test_harness_tools_wrap_only_inside_an_attempt_and_say_what_was_offered():
    task = WriteTask(SYNTHEA.parent / "write_cases")
    assert current() is None
    assert harness_tools(task, {}) == task.agent_tools({})  # no attempt: the task's own tools
    with observe() as log:
        tools = harness_tools(task, {})
        assert log.offered == ["lookup_medication_code", "build_medication_statement",
                               "validate_medication_statement"]
        tools[0].invoke({"query": "ibuprofen"})
    assert current() is None and log.closed and [c["tool"] for c in log.transcript()] == ["lookup_medication_code"]
    with observe() as none:
        pass
    assert none.offered is None and none.transcript() is None  # no tools given: not applicable


def test_refused_connections_are_kept_to_a_bound_and_the_rest_counted():
    """A command that floods its case's socket with refused connections cannot grow the record
    without bound: the first MAX_REFUSED are kept, the rest counted in one entry; none after the
    attempt ended."""
    from pytest_groundeval.model import RefusedConnection
    from pytest_groundeval.run.toolcalls import ToolLog

    log = ToolLog()
    assert log.refused is None
    for pid in range(ToolLog.MAX_REFUSED + 7):
        log.refuse({"pid": pid + 2, "command": "x", "reason": "not the case's agent command"})
    kept = log.refused
    assert len(kept) == ToolLog.MAX_REFUSED + 1 and kept[-1]["reason"] == "7 more refused connection(s), not kept"
    assert [RefusedConnection.model_validate(r).pid for r in kept[:2]] == [2, 3]
    log.close()
    log.refuse({"pid": 1, "reason": "late"})
    assert len(log.refused) == ToolLog.MAX_REFUSED + 1
