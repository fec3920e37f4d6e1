"""The pytest layer keeps its session state on ``config.stash`` (issue 17): no module of
``pytest_groundeval/pytest/`` or ``integrations/langsmith/`` holds a session object in a
process global (a mutable module-level list, dict or set, or a ``global`` rebinding), and none
finds a groundeval plugin by its registered name: each is under its stash key (``keys.py``),
so sessions nested in one process (pytester) each see their own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest_groundeval

PACKAGE = Path(pytest_groundeval.__file__).parent
LAYER = sorted([*(PACKAGE / "pytest").glob("*.py"), *(PACKAGE / "integrations" / "langsmith").glob("*.py")])
MUTABLE_CALLS = {"list", "dict", "set", "defaultdict", "OrderedDict", "deque"}


def _mutable(value: ast.expr | None) -> bool:
    if isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)):
        return True
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in MUTABLE_CALLS


def process_globals(source: str) -> list[str]:
    """Module-level mutable containers (``__all__`` aside) and ``global`` statements."""
    tree = ast.parse(source)
    found = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        names = [t.id for t in targets if isinstance(t, ast.Name) and t.id != "__all__"]
        if names and _mutable(value):
            found += [f"line {node.lineno}: {name}" for name in names]
    found += [f"line {n.lineno}: global {', '.join(n.names)}" for n in ast.walk(tree) if isinstance(n, ast.Global)]
    return found


def plugin_lookups(source: str) -> list[str]:
    """``pluginmanager.get_plugin("groundeval-...")`` (or ``getplugin``): a plugin found by name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("get_plugin", "getplugin"):
            arg = node.args[0] if node.args else None
            if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)) or arg.value.startswith("groundeval"):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_pytest_layer_has_no_process_globals_and_finds_no_plugin_by_name():
    assert len(LAYER) > 10
    bad = {str(p.relative_to(PACKAGE)): hits for p in LAYER
           if (hits := process_globals(p.read_text()) + plugin_lookups(p.read_text()))}
    assert not bad, bad


def test_the_checks_catch_what_they_forbid():
    assert process_globals('_EVALUATORS: list["Evaluator"] = []\nX = ()\n__all__ = ["a"]\n') == ["line 1: _EVALUATORS"]
    assert process_globals("_ACTIVE = list()\n") == ["line 1: _ACTIVE"]
    assert process_globals("F = False\ndef f():\n    global F\n    F = True\n") == ["line 3: global F"]
    assert plugin_lookups('r = config.pluginmanager.get_plugin("groundeval-reporter")\n') == [
        "line 1: config.pluginmanager.get_plugin('groundeval-reporter')"]
    assert plugin_lookups('config.pluginmanager.get_plugin("terminalreporter")\n') == []
