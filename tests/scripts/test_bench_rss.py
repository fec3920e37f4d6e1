"""The benches' own-peak-RSS probe (scripts/_bench_util.py RSS_PLUGIN) reads the child's own
peak, not its parent's: a small child of a large parent reads small (ru_maxrss, which the kernel
carries over an exec, reads the parent's peak: the bench_memory defect of issue 31)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from _bench_util import RSS_PLUGIN  # noqa: E402

MIB = 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_a_small_child_of_a_large_parent_reads_its_own_peak():
    big = bytearray(200 * MIB)
    big[::4096] = b"\x01" * len(big[::4096])  # touched: resident in this (the parent) process
    code = RSS_PLUGIN + ("\nimport resource\n"
                         "print(own_peak_rss(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)\n")
    own, maxrss = map(int, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                          check=True).stdout.split())
    del big
    assert own < 60 * MIB  # a bare interpreter: its own peak
    assert maxrss >= 200 * MIB or own < maxrss  # (where the kernel carries the parent's peak over, the old read did)
