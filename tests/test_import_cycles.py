"""No import cycles among groundeval's own modules (issue 17): every ``import`` and ``from``
of every module, at module level and inside function bodies alike (a lazy import still
closes a cycle, only later), read with ``ast``; a cycle is a defect, found here, not when
some import order first hits a half-initialised module.

Imports under ``if TYPE_CHECKING:`` never run and are not edges. A package's ``__init__``
runs before any of its submodules, so importing ``a.b.c`` is an edge to ``a.b.c`` and to the
packages ``a.b`` and ``a``, except the packages the importer is itself inside (a module of
``a.b`` importing ``a.b`` or its sibling ``a.b.d`` does not re-enter ``a.b``'s ``__init__``,
which started before it; an ``__init__`` importing its own submodule is the usual re-export,
not a cycle).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest_groundeval

PACKAGE = Path(pytest_groundeval.__file__).parent
ROOT = PACKAGE.name


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """``{dotted name: file}`` of every module of the package (a package by its ``__init__``)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = (ROOT, *path.relative_to(package).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth (functions, methods, ``try``, ``if``), except
    those under ``if TYPE_CHECKING:`` (their ``else:`` branch runs and is kept)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def walk(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.orelse:
                walk(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            walk(child)

    walk(tree)
    return found


def _targets(name: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    """The modules of ours that one import statement of module ``name`` loads."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if node.level:  # relative: from the module's package
        base = name.split(".") if is_package else name.split(".")[:-1]
        base = base[:len(base) - node.level + 1]
        parent = ".".join(base + ([node.module] if node.module else []))
    else:
        parent = node.module or ""
    out = {parent}
    for alias in node.names:  # ``from pkg import mod`` loads the submodule pkg.mod
        if f"{parent}.{alias.name}" in known:
            out.add(f"{parent}.{alias.name}")
    return out


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """``{module: the modules of ours it imports}`` (with the packages whose ``__init__`` runs first)."""
    mods = modules(package)
    known = set(mods)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            for target in _targets(name, is_package, node, known):
                parts = target.split(".")
                for i in range(1, len(parts) + 1):  # a.b.c runs a's and a.b's __init__ first
                    mod = ".".join(parts[:i])
                    inside = name == mod or name.startswith(mod + ".")
                    if mod in known and not inside:
                        edges.add(mod)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each with one cycle
    through it spelled out, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                comps.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(_one_cycle(graph, comp) for comp in comps)


def _one_cycle(graph: dict[str, set[str]], comp: set[str]) -> list[str]:
    """A shortest cycle through the component's first module, as ``[a, b, ..., a]``."""
    start = min(comp)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & comp):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return sorted(comp)


def test_groundeval_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles among groundeval's modules:\n" + "\n".join(" -> ".join(c) for c in found)


# ---------------------------------------------------------------- the walker itself
def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / ROOT
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "a.py": f"from {ROOT}.b import thing\n",
        "sub/__init__.py": "",
        "b.py": f"def thing():\n    from {ROOT}.sub import c\n    return c\n",
        "sub/c.py": f"def late():\n    if True:\n        from {ROOT} import a\n",
    })
    found = cycles(import_graph(root))
    assert found == [[f"{ROOT}.a", f"{ROOT}.b", f"{ROOT}.sub.c", f"{ROOT}.a"]]


def test_type_checking_imports_and_an_init_re_exporting_its_submodule_are_not_cycles(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "pkg/__init__.py": "from .mod import X\n",  # the usual re-export
        "pkg/mod.py": (f"from typing import TYPE_CHECKING\nfrom {ROOT}.pkg import other\nX = 1\n"
                       f"if TYPE_CHECKING:\n    from {ROOT}.user import Y\n"),
        "pkg/other.py": "",
        "user.py": f"from {ROOT}.pkg.mod import X\nY = X\n",
    })
    graph = import_graph(root)
    assert graph[f"{ROOT}.user"] == {f"{ROOT}.pkg", f"{ROOT}.pkg.mod"}  # the package's __init__ runs first
    assert graph[f"{ROOT}.pkg.mod"] == {f"{ROOT}.pkg.other"}  # not its own package, not TYPE_CHECKING
    assert cycles(graph) == []


def test_a_package_init_importing_a_module_that_imports_the_package_from_outside_is_a_cycle(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "pkg/__init__.py": f"from {ROOT}.tool import helper\n",
        "pkg/mod.py": "",
        "tool.py": f"def helper():\n    import {ROOT}.pkg.mod\n",
    })
    assert cycles(import_graph(root)) == [[f"{ROOT}.pkg", f"{ROOT}.tool", f"{ROOT}.pkg"]]
