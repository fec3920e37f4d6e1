"""groundeval is a ``pytest11`` entry point: it loads in every pytest run of the environment
it is installed in. Its options must not clash with common plugins, or pytest would not
start at all. pytest-timeout, pytest-retry, pytest-rerunfailures, pytest-repeat and
pytest-base-url are dev dependencies, so they are installed here and auto-load in these fresh processes."""

from __future__ import annotations

from importlib import metadata

import pytest
from conftest import SMALL_SET, read_record

PLUGINS = {  # distribution → the option it owns
    "pytest-timeout": "--timeout=TIMEOUT",
    "pytest-retry": "--retries=RETRIES",
    "pytest-rerunfailures": "--reruns=RERUNS",
    "pytest-base-url": "--base-url=url",
    "pytest-repeat": "--count=COUNT",
}


@pytest.fixture
def with_all_plugins(evalproject, monkeypatch):
    for dist in PLUGINS:
        metadata.distribution(dist)  # installed (a dev dependency), else this test is meaningless
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)  # nothing disabled: real auto-loading
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    return evalproject


def test_pytest_starts_with_every_common_plugin_beside_groundeval(with_all_plugins):
    result = with_all_plugins.runpytest_subprocess("--help")
    assert result.ret == 0, result.stderr.str()
    text = result.stdout.str()
    for option in PLUGINS.values():
        assert option in text, option
    for ours in ("--agent=NAME", "--model=MODEL", "--agent-timeout=SECONDS", "--agent-retries=N",
                 "--agent-retry-delay=SECONDS", "--model-base-url=URL", "--data-dir=PATH",
                 "--no-groundeval-html", "--groundeval-runs-dir=DIR"):
        assert ours in text, ours


def test_an_eval_runs_with_their_options_and_ours_side_by_side(with_all_plugins):
    p = with_all_plugins
    result = p.runpytest_subprocess(
        "--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider",
        "--timeout", "120", "--retries", "0", "--reruns", "0", "--base-url", "http://127.0.0.1:9",
        "--agent-timeout", "7", "--agent-retries", "1", "--agent-retry-delay", "0.01",
        "--agent=agents_under_test:Correct")
    result.assert_outcomes(passed=len(SMALL_SET))
    opts = read_record(p)["options"]
    assert opts["agent_timeout"] == 7.0 and opts["retries"] == 1
    assert opts["base_url"] is None  # pytest-base-url's --base-url is not ours


def test_their_retries_do_not_change_our_record(with_all_plugins):
    """pytest-rerunfailures re-runs a failed item; the record keeps one result per case."""
    p = with_all_plugins
    result = p.runpytest_subprocess("--data-dir", "data", "--run-record", "record.json", "-p", "no:cacheprovider",
                                    "--reruns", "1", "--agent=agents_under_test:Omitting")
    assert result.ret == 1
    cases = read_record(p)["cases"]
    assert len(cases) == len(SMALL_SET) and len({c["case_id"] for c in cases}) == len(SMALL_SET)
