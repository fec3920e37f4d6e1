"""The record's ``git`` block (``RunRecord.git``: commit, branch, dirty), read as the
langsmith SDK reads its own (``langsmith.env.get_git_info``, run in a fresh interpreter in the
same work tree as the anchor), carried by merge; and the suite version LangSmith's dataset
versions are tagged with (``integrations/langsmith/common.py``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pytest_groundeval.integrations.langsmith.common import dataset_tags, git_metadata, suite_versions
from pytest_groundeval.model import GitInfo, RunRecord
from pytest_groundeval.store.merge import merged_git
from pytest_groundeval.store.record import git_info

SDK_GIT = "import json; from langsmith.env import get_git_info; print(json.dumps(get_git_info()))"


def _git(path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.test", *args], cwd=path,
                          check=True, capture_output=True, text=True).stdout.strip()


def _sdk(path) -> dict:
    """What the SDK's evaluate() puts in an experiment's metadata["git"], read in ``path``."""
    out = subprocess.run([sys.executable, "-c", SDK_GIT], cwd=path, check=True, capture_output=True, text=True)
    info = json.loads(out.stdout)
    return {k: info.get(k) for k in ("commit", "branch", "dirty")}


@pytest.fixture
def repo(tmp_path):
    _git(tmp_path, "init", "-q", "-b", "release/2026.12")
    (tmp_path / "cases.json").write_text("[]\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "cases")
    return tmp_path


def test_the_git_block_is_what_the_sdk_reads(repo):
    sha = _git(repo, "rev-parse", "HEAD")
    clean = git_info(repo)
    assert clean == GitInfo(commit=sha, branch="release/2026.12", dirty=False)
    assert clean.model_dump() == _sdk(repo)
    (repo / "scratch.txt").write_text("untracked\n")  # an untracked file makes the tree dirty, as for the SDK
    assert git_info(repo).dirty is True and git_info(repo).model_dump() == _sdk(repo)
    (repo / "scratch.txt").unlink()
    (repo / "cases.json").write_text("[1]\n")  # so does an uncommitted change
    assert git_info(repo).dirty is True and git_info(repo).model_dump() == _sdk(repo)
    _git(repo, "stash", "-q")
    _git(repo, "checkout", "-q", "--detach")  # CI checks out a detached HEAD: the branch is "HEAD"
    assert git_info(repo) == GitInfo(commit=sha, branch="HEAD", dirty=False)
    assert git_info(repo).model_dump() == _sdk(repo)


def test_outside_a_work_tree_there_is_no_block(tmp_path):
    assert git_info(tmp_path) is None
    assert git_metadata(None) == {"commit": None, "branch": None, "dirty": None}  # the experiment's: nulls
    _git(tmp_path, "init", "-q")  # a repository without a commit: no commit to name
    assert git_info(tmp_path) is None


def _record(git: GitInfo | None, sha: str | None = "a" * 40) -> RunRecord:
    return RunRecord.model_construct(git=git, git_sha=sha)


def test_merge_carries_the_block():
    a = GitInfo(commit="a" * 40, branch="HEAD", dirty=False)
    b = GitInfo(commit="a" * 40, branch="main", dirty=True)
    assert merged_git([_record(a), _record(b)]) == GitInfo(commit="a" * 40, branch="HEAD", dirty=True)
    assert merged_git([_record(a), _record(a)]) == a
    assert merged_git([_record(None), _record(b)]) == b  # a shard from before the block
    assert merged_git([_record(None), _record(None)]) is None
    unknown = GitInfo(commit="a" * 40, branch=None, dirty=None)
    assert merged_git([_record(unknown), _record(unknown)]) == unknown  # not "clean" when no shard knew


def test_the_suite_version_names_the_cases_and_their_content():
    cases = [{"task": "write", "case_id": "b", "content_hash": "sha256:2"},
             {"task": "write", "case_id": "a", "content_hash": "sha256:1"},
             {"task": "labs", "case_id": "a", "content_hash": "sha256:1"}]
    v = suite_versions(cases)
    assert set(v) == {"labs", "write"} and all(len(x) == 12 and int(x, 16) >= 0 for x in v.values())
    assert v["labs"] != v["write"]
    assert suite_versions(reversed(cases)) == v  # order does not matter
    assert suite_versions(cases + [dict(cases[0])]) == v  # a repeat is the same case
    edited = [dict(cases[0], content_hash="sha256:9"), *cases[1:]]
    assert suite_versions(edited)["write"] != v["write"] and suite_versions(edited)["labs"] == v["labs"]
    assert suite_versions(cases[1:])["write"] != v["write"]  # a case fewer: another version
    # the ids and hashes cannot run together: ("a", "b\n...") is not ("a\nb", ...)
    assert suite_versions([{"task": "t", "case_id": "a", "content_hash": "b\nc"}]) != \
        suite_versions([{"task": "t", "case_id": "a\nb", "content_hash": "c"}])


def test_the_dataset_tags_are_the_pytest_plugins_and_the_suites():
    git = {"commit": "c" * 40, "branch": "main", "dirty": True}
    assert dataset_tags(git, "0123456789ab") == [f"git:commit:{'c' * 40}", "git:branch:main", "suite:0123456789ab"]
    assert dataset_tags(git_metadata(None), "0123456789ab") == ["suite:0123456789ab"]
    assert dataset_tags({"commit": "c" * 40, "branch": None}, None) == [f"git:commit:{'c' * 40}"]
