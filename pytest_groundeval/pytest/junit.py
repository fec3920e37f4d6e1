"""junitxml's file (``--junitxml``) made to say what the run record says.

pytest's junitxml writes a test that fails in its call phase as ``<failure>``; an errored
eval case (the agent raised, timed out, the server died: outcome ``error`` in the record) is
such a test, so CI systems would count harness and agent errors as wrong answers and show
``errors="0"``. junitxml has no way for a plugin to classify a call-phase failure as an
error, nor to add suite-level properties from the controller under xdist (FRICTION.md), so
once junitxml has written its file (the reporter's ``pytest_sessionfinish`` wrapper, after
its ``yield``) this rewrites it:

* each testcase whose ``groundeval.outcome`` property is ``error`` carries ``<error
  type="groundeval.<kind>">`` in place of its ``<failure>``, and the suite's ``failures`` /
  ``errors`` counts move with it;
* each eval testcase's ``classname`` is its suite's name (``groundeval.extraction`` for a
  bundled suite, ``evals.test_write`` for a project's own: ``items.py``), not the mangled path
  of the file it was collected from (``.venv.lib.python3.11.site-packages...``);
* the suite gets ``groundeval.*`` properties: run id, agent, model, record path,
  completeness, cut short and why, the gate's verdict and why.

The file is replaced atomically; one that cannot be read as junitxml's is left as it is.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from pytest_groundeval.model import RunRecord

PREFIX = "groundeval."


def suite_properties(record: RunRecord, record_path: Path | None) -> list[tuple[str, str]]:
    comp, gate = record.completeness, record.gate
    props = [("run_id", record.run_id), ("agent", record.agent or ""), ("model", record.model or ""),
             ("record", str(record_path) if record_path is not None else ""),
             ("selected", "" if comp.selected is None else str(comp.selected)), ("recorded", str(comp.recorded)),
             ("cut_short", "true" if comp.cut_short else "false")]
    if comp.reason:
        props.append(("cut_short_reason", comp.reason))
    props.append(("gate", "none" if gate is None else ("passed" if gate.passed else "failed")))
    if gate is not None and gate.reason:
        props.append(("gate_reason", gate.reason))
    return [(PREFIX + k, v) for k, v in props]


def rewrite(path: Path, record: RunRecord, record_path: Path | None = None) -> bool:
    """Rewrite junitxml's file at ``path`` as above; False when it is not there or not junitxml's."""
    from pytest_groundeval.store.record import write_json_atomic

    try:
        tree = ET.parse(path)
    except (OSError, ET.ParseError):
        return False
    root = tree.getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    if not suites:
        return False
    for suite in suites:
        moved = 0
        for case in suite.iter("testcase"):
            props = {p.get("name"): p.get("value") for p in case.iter("property")}
            if props.get(PREFIX + "suite"):
                case.set("classname", props[PREFIX + "suite"])
            failure = case.find("failure")
            if props.get(PREFIX + "outcome") != "error" or failure is None:
                continue
            failure.tag = "error"
            failure.set("type", PREFIX + (props.get(PREFIX + "error_kind") or "unknown"))
            moved += 1
        if moved:
            suite.set("failures", str(max(0, int(suite.get("failures") or 0) - moved)))
            suite.set("errors", str(int(suite.get("errors") or 0) + moved))
        properties = suite.find("properties")
        if properties is None:
            properties = ET.Element("properties")
            suite.insert(0, properties)
        for name, value in suite_properties(record, record_path):
            ET.SubElement(properties, "property", name=name, value=value)
    write_json_atomic(path, ET.tostring(root, encoding="utf-8", xml_declaration=True))
    return True


def rewrite_for(config: Any, record: RunRecord | None, record_path: Path | None) -> None:
    """The session's ``--junitxml`` file, if it asked for one and a record was built."""
    xmlpath = getattr(config.option, "xmlpath", None)
    if not xmlpath or record is None or hasattr(config, "workerinput"):
        return
    path = Path(xmlpath).expanduser()
    if not path.is_absolute():
        path = Path(config.invocation_params.dir) / path
    rewrite(path, record, record_path)
