"""The FHIR server hook of one case (issue 18's contract), as values: a task with
``fhir_server = True`` gets, per case, a fresh repository on the harness's FHIR server
(``fhir/server``) seeded with ``case.inputs["bundle"]``.

* :func:`open_case` (after the case is loaded, before the agent is called): the repository
  seeded, ``case.inputs["fhir_base_url"]`` set and the literal ``{fhir_base_url}`` in the
  prompt replaced with it (the content hash was computed before: it never depends on the port
  or on the case's token, which the base URL holds and only this case's agent is given); a
  bundle the server cannot take (over its body limit, or not seeded) is a ``case`` error.
* :func:`close_case` (after the call, also when the agent errored): the server's request log
  and the state diff as :class:`FhirActivity`, on the result (``CaseResult.fhir``) and on the
  case for the scorer (``case.inputs["fhir_activity"]``); a server that died during the case
  makes it an error of kind ``server`` (it is started again for the next case); for a task
  scored from the log (:func:`log_is_evidence`) so does a request log the server cut at its
  bound (``requests_cut``), or a write whose body the record's bounds cut (:func:`partial`: the
  evidence is partial, so the case is not scored, never passed or failed on part of it).
* :func:`rescored_case`: ``--rescore`` puts the stored activity back on the case (no server).
* :func:`masked`: the model-call cache keys a case's messages with its base URL as
  ``{fhir_base_url}`` (:class:`fhir_base_of` around the agent call), so a replay under
  ``--model-cache strict`` matches though the port differs run to run.
"""

from __future__ import annotations

import contextvars
import re
import dataclasses
from typing import Any

from pytest_groundeval.model import Case, ErrorInfo

PLACEHOLDER = "{fhir_base_url}"


def uses_server(task: Any) -> bool:
    return bool(getattr(task, "fhir_server", False))


def log_is_evidence(task: Any) -> bool:
    """Does the task score what its agent did from the server's request log (orders: its
    writes), so that a partial log is no evidence to score on (:func:`partial`)? A task scored
    on the agent's answer (labs) is scored whatever the log kept."""
    return uses_server(task) and bool(getattr(task, "fhir_log_is_evidence", False))


@dataclasses.dataclass(frozen=True)
class Opened:
    """A case's repository while its agent runs."""

    server: Any
    handle: Any  # manager.ServerCase


def open_case(server: Any, task: Any, case: Case) -> tuple[Case, Opened | None, ErrorInfo | None]:
    """The case with its FHIR base URL in inputs and prompt, and its repository; or the error
    that stops it (``server``: not run, naming what to install, or the server failing)."""
    from pytest_groundeval.fhir.server.manager import CaseRefused, ServerDied, ServerUnavailable

    if server is None:
        return case, None, ErrorInfo.never_run(
            "server", f"task {case.ref.task!r} needs the harness's FHIR server, and this run has none")
    ref = case.ref
    key = f"{ref.task}:{ref.case_id}" + (f"[r{ref.repeat}]" if ref.repeat is not None else "")
    today = case.inputs.get("today")
    clock = f"{today}T00:00:00Z" if isinstance(today, str) and len(today) == 10 else None
    try:
        handle = server.open_case(case.inputs.get("bundle"), key=key, clock=clock,
                                  write_cap=getattr(task, "fhir_write_cap", None))
    except ServerUnavailable as e:
        return case, None, ErrorInfo.never_run("server", e.reason)
    except CaseRefused as e:
        return case, None, ErrorInfo(kind="case", message=f"{ref.task}:{ref.case_id}: {e}")
    except ServerDied as e:
        return case, None, ErrorInfo.never_run("server", str(e))
    inputs = dict(case.inputs)
    inputs["fhir_base_url"] = handle.base_url
    seeded = dataclasses.replace(case, prompt=case.prompt.replace(PLACEHOLDER, handle.base_url), inputs=inputs)
    return seeded, Opened(server, handle), None


def close_case(opened: Opened, case: Case) -> tuple[Case, Any, ErrorInfo | None]:
    """The case with ``inputs["fhir_activity"]``, the :class:`FhirActivity` for the result, and
    an error of kind ``server`` when the server died during the case (else None)."""
    from pytest_groundeval.fhir.server.manager import CaseRefused, ServerDied
    from pytest_groundeval.fhir.state import diff_states
    from pytest_groundeval.model import FhirActivity, FhirExchange

    handle = opened.handle
    try:
        got = opened.server.activity(handle, close=True)  # the log and the state; the repository dropped
    except (ServerDied, CaseRefused) as e:
        opened.server.close_case(handle)
        activity = FhirActivity(base_url=handle.base_url)
        return _with(case, activity), activity, ErrorInfo(kind="server", message=(
            f"{e}; it is started again for the next case"))
    activity = FhirActivity(
        base_url=handle.base_url,
        requests=[FhirExchange.model_validate(r) for r in got.get("requests", [])],
        changes=diff_states(handle.before, got.get("state") or {}),
        requests_cut=int(got.get("requests_cut") or 0))
    return _with(case, activity), activity, None


_CUT_AT = re.compile(r"^fhir\.requests\[(\d+)\]\.(request|response)")


def may_write(exchange: Any) -> bool:
    """A request that can write: any but a read (GET, HEAD) or a search by POST (``_search``)."""
    path = str(exchange.path or "").split("?", 1)[0].rstrip("/")
    return exchange.method.upper() not in ("GET", "HEAD") and not path.endswith("_search")


def partial(case: Case, activity: Any, truncated: Any = ()) -> str | None:
    """Why the FHIR evidence of a case is partial, so it is not scored (None: it is whole): the
    server's log cut at its bound (``requests_cut``), or the body of a request that can write
    cut to the record's bounds (``truncated``: ``CaseResult.truncated``'s entries, whose
    ``fhir.requests[i]`` name the exchange). What the dropped part wrote or undid cannot be
    shown; a score would rest on part of the evidence."""
    where = f"{case.ref.task}:{case.ref.case_id}: not scored: "
    if activity is None:
        return None
    if activity.requests_cut:
        kept = len(activity.requests)
        return (where + f"the agent made {kept + activity.requests_cut} requests to its FHIR server and the "
                f"request log kept the first {kept} (its bound on the bodies it holds, FhirServer.max_log_bytes); "
                f"what the other {activity.requests_cut} wrote or undid cannot be shown")
    cut = []
    for entry in truncated or ():
        m = _CUT_AT.match(str(entry))
        if m and int(m.group(1)) < len(activity.requests) and may_write(activity.requests[int(m.group(1))]):
            cut.append(str(entry))
    if cut:
        return (where + f"the body of a write was cut to the record's bounds ({'; '.join(cut[:3])}): what its "
                "dropped part wrote or undid cannot be shown")
    return None


def _with(case: Case, activity: Any) -> Case:
    return dataclasses.replace(case, inputs={**case.inputs, "fhir_activity": activity})


def rescored_case(case: Case, stored: Any) -> Case:
    """``--rescore``: the stored activity (``CaseResult.fhir``) on the case, as a run left it."""
    if stored is None:
        return case
    inputs = {**case.inputs, "fhir_base_url": stored.base_url, "fhir_activity": stored}
    return dataclasses.replace(case, prompt=case.prompt.replace(PLACEHOLDER, stored.base_url), inputs=inputs)


# -- the model-call cache's view of a case's messages ------------------------------------------
_BASE: contextvars.ContextVar[str | None] = contextvars.ContextVar("groundeval_fhir_base", default=None)


class fhir_base_of:
    """``with fhir_base_of(url):`` the model calls made inside belong to a case whose FHIR base is
    ``url`` (a no-op for None)."""

    def __init__(self, url: Any) -> None:
        self.url = url if isinstance(url, str) and url else None
        self._token: Any = None

    def __enter__(self) -> None:
        if self.url is not None:
            self._token = _BASE.set(self.url)

    def __exit__(self, *exc: Any) -> None:
        if self._token is not None:
            _BASE.reset(self._token)


def masked(value: Any) -> Any:
    """``value`` (JSON data) with the running case's FHIR base URL as ``{fhir_base_url}``."""
    base = _BASE.get()
    if base is None:
        return value
    return _mask(value, base)


def _mask(value: Any, base: str) -> Any:
    if isinstance(value, str):
        return value.replace(base, PLACEHOLDER) if base in value else value
    if isinstance(value, dict):
        return {k: _mask(v, base) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mask(v, base) for v in value]
    return value
