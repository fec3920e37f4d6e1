"""The example GitHub Actions workflows (``examples/github-actions/``: this repository's own
``groundeval.yml`` and ``user-project.yml`` for a repository that installs groundeval) and
the project's release workflow (``.github/workflows/release.yml``), checked for what they do,
not only that they parse (issue 21 items 5 and 6):

- every command a ``run:`` step runs exists: ``groundeval`` subcommands and their options
  (argparse), thresholds naming real tasks and metrics, pytest's options (the command
  collected for real), ``gh`` and ``uv`` subcommands, and no other program than those named;
- the ``if:`` conditions and ``concurrency`` evaluated (a small evaluator of the expressions
  they use) for a push to main, a pull request from the repository and one from a fork: no
  step that reads a secret or comments runs for a fork, the comment does run for the
  repository's own pull request, ``cancel-in-progress`` only for pull requests and every push
  to main its own group;
- the shard step run with a stand-in pytest exiting 0..5: 0, 1 (failed cases: the merged
  gate judges) and 5 (an empty shard) succeed, 2, 3 and 4 fail the job;
- the comment step run against a stand-in ``gh`` holding a pull request's comments: it edits
  only the comment carrying groundeval's marker (not another bot's last comment, not a
  person's), and creates one when there is none.

``test_each_defect_is_caught`` puts each defect the issue names back into a workflow and
checks that ``problems`` names it. The user workflow's exact commands run in a project that
installed groundeval from a git URL in tests/test_install.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT

from pytest_groundeval import cli
from pytest_groundeval.reporting.gate import parse_threshold
from pytest_groundeval.tasks import registry

EXAMPLES = ROOT / "examples" / "github-actions"
REPO_WORKFLOW = EXAMPLES / "groundeval.yml"
USER_WORKFLOW = EXAMPLES / "user-project.yml"
RELEASE_WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
EVAL_WORKFLOWS = {"repo": REPO_WORKFLOW, "user": USER_WORKFLOW}
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
REPOSITORY = "me/my-project"
JQ = shutil.which("jq")  # the stand-in gh's --jq (gh has jq built in)

# the programs a workflow may run, and their subcommands where they have any
PROGRAMS = {"uv", "gh", "groundeval", "pytest", "test", "echo", "cat", "tail", "exit", "cd", "python"}
SUBCOMMANDS = {"uv": {"venv", "pip install", "run", "sync", "build", "version"},
               "gh": {"api", "pr comment", "run list", "run download", "release create"}}
SHELL_WORDS = {"if", "then", "else", "elif", "fi", "{", "}", "!"}


# ---------------------------------------------------------------- GitHub's expressions
class Expr:
    """The part of GitHub Actions' expression language the workflows use: contexts
    (``github.event.pull_request.number``), string/number/boolean literals, ``!``, ``==``,
    ``!=`` (strings compared case-insensitively), ``&&`` and ``||`` (returning an operand, as
    GitHub's do), parentheses, and ``format``, ``hashFiles``, ``cancelled``, ``always``,
    ``success``, ``failure``."""

    TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)|(?P<op>==|!=|&&|\|\||[!(),])"
                       r"|(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*))")

    def __init__(self, text: str, context: dict[str, Any], functions: dict[str, Any]) -> None:
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            m = self.TOKEN.match(text, pos)
            assert m and m.end() > pos, f"cannot read the expression at {text[pos:]!r}"
            kind = m.lastgroup
            self.tokens.append((kind, m[kind]))
            pos = m.end()
        self.i, self.context, self.functions = 0, context, functions

    def value(self) -> Any:
        v = self._or()
        assert self.i == len(self.tokens), f"unread: {self.tokens[self.i:]}"
        return v

    def _peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def _take(self) -> tuple[str, str]:
        self.i += 1
        return self.tokens[self.i - 1]

    def _or(self) -> Any:
        v = self._and()
        while self._peek() == "||":
            self._take()
            right = self._and()
            v = v if truthy(v) else right
        return v

    def _and(self) -> Any:
        v = self._not()
        while self._peek() == "&&":
            self._take()
            right = self._not()
            v = right if truthy(v) else v
        return v

    def _not(self) -> Any:
        if self._peek() == "!":
            self._take()
            return not truthy(self._not())
        return self._cmp()

    def _cmp(self) -> Any:
        v = self._primary()
        if self._peek() in ("==", "!="):
            op = self._take()[1]
            right = self._primary()
            same = (v.lower() == right.lower()) if isinstance(v, str) and isinstance(right, str) else v == right
            return same if op == "==" else not same
        return v

    def _primary(self) -> Any:
        kind, text = self._take()
        if text == "(":
            v = self._or()
            assert self._take()[1] == ")"
            return v
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            return float(text) if "." in text else int(text)
        if text in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[text]
        if self._peek() == "(":  # a function call
            self._take()
            args = []
            while self._peek() != ")":
                args.append(self._or())
                if self._peek() == ",":
                    self._take()
            self._take()
            assert text in self.functions, f"unknown function {text}()"
            return self.functions[text](*args)
        v: Any = self.context
        for part in text.split("."):
            v = v.get(part) if isinstance(v, dict) else None
        return v


def truthy(v: Any) -> bool:
    return v not in (None, False, 0, "")


def evaluate(value: Any, context: dict[str, Any], functions: dict[str, Any]) -> Any:
    """A workflow value: ``${{ expr }}`` alone is the expression's value; text with
    expressions in it is the text with their values; an ``if:`` may omit the braces."""
    if not isinstance(value, str):
        return value
    whole = re.fullmatch(r"\s*\$\{\{((?:(?!\}\}).)*)\}\}\s*", value, re.S)  # one expression, alone
    if whole:
        return Expr(whole[1], context, functions).value()
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(Expr(m[1], context, functions).value()), value)


def condition(value: Any, context: dict[str, Any], functions: dict[str, Any]) -> bool:
    if value is None:
        return truthy(functions["success"]())
    if isinstance(value, str) and "${{" not in value:
        return truthy(Expr(value, context, functions).value())
    return truthy(evaluate(value, context, functions))


def event(kind: str, sha: str = "a1", number: int = 7) -> dict[str, Any]:
    """The context of a push to main, or a pull request from this repository or a fork."""
    github: dict[str, Any] = {"repository": REPOSITORY, "sha": sha, "token": "ghs_token", "workflow": "groundeval"}
    if kind == "push":
        github.update(event_name="push", ref="refs/heads/main", event={})
    else:
        head = REPOSITORY if kind == "pr" else "someone/my-project"
        github.update(event_name="pull_request", ref=f"refs/pull/{number}/merge",
                      event={"pull_request": {"number": number, "head": {"repo": {"full_name": head}}}})
    return {"github": github, "matrix": {"shard": 1}, "secrets": {"ANTHROPIC_API_KEY": "sk-secret"}, "env": {}}


def functions(needs_ran: bool = True) -> dict[str, Any]:
    """The worst case for a guard: every file exists, nothing was cancelled."""
    return {"format": lambda f, *a: re.sub(r"\{(\d+)\}", lambda m: str(a[int(m[1])]), f),
            "hashFiles": lambda *a: "f00d", "cancelled": lambda: False, "always": lambda: True,
            "success": lambda: needs_ran, "failure": lambda: False}


def load(text: str) -> dict[str, Any]:
    workflow = yaml.safe_load(text)
    if True in workflow:  # YAML 1.1 reads the key `on` as true
        workflow["on"] = workflow.pop(True)
    return workflow


def steps_that_run(workflow: dict[str, Any], context: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """(job, step index) -> step, for the steps that run for the event (jobs in order of
    ``needs``; a job whose needed job did not run runs only if its ``if`` does not ask for
    success)."""
    ran: dict[str, bool] = {}
    out = {}
    pending = dict(workflow["jobs"])
    while pending:
        for name, job in list(pending.items()):
            needs = job.get("needs") or []
            needs = [needs] if isinstance(needs, str) else needs
            if any(n in pending for n in needs):
                continue
            del pending[name]
            ran[name] = condition(job.get("if"), context, functions(all(ran[n] for n in needs)))
            if ran[name]:
                for i, step in enumerate(job["steps"]):
                    if condition(step.get("if"), context, functions()):
                        out[(name, i)] = step
    return out


def jobs_that_run_without_their_needs(workflow: dict[str, Any], context: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """Jobs that run for the event though a job they need did not (they find no artifacts)."""
    ran = {job for job, _ in steps_that_run(workflow, context)}
    out = []
    for name, job in workflow["jobs"].items():
        needs = job.get("needs") or []
        needs = [needs] if isinstance(needs, str) else needs
        missing = [n for n in needs if n not in ran]
        if name in ran and missing:
            out.append((name, missing))
    return out


def reads_a_secret(step: dict[str, Any], job: dict[str, Any]) -> bool:
    return "secrets." in json.dumps({k: v for k, v in step.items() if k != "name"}) or \
        "secrets." in json.dumps(job.get("env") or {})


def comments(step: dict[str, Any]) -> bool:
    run = step.get("run") or ""
    return "gh pr comment" in run or "/comments" in run or "comment" in (step.get("uses") or "")


# ---------------------------------------------------------------- the commands
def commands(script: str) -> list[list[str]]:
    """Each simple command of a shell script, as words (``$(...)`` inner commands too;
    assignments, redirections and the shell's keywords left out)."""
    found = []
    for line in script.replace("\\\n", " ").splitlines():
        lex = shlex.shlex(line, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        lex.commenters = "#"
        command: list[str] = []
        redirect = False
        for word in list(lex) + [";"]:
            if word in (">", ">>", "2>", "<"):
                redirect = True
                continue
            if set(word) <= set("();|&") :
                if command:
                    found.append(command)
                command, redirect = [], False
                continue
            if redirect:
                redirect = False
                continue
            if not command and (word in SHELL_WORDS or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", word)):
                continue
            command.append(word)
    return found


def program(words: list[str]) -> tuple[str, list[str]]:
    """The program a command runs and its arguments (``uv run X``, ``.venv/bin/X``: X)."""
    if words[:2] == ["uv", "run"] and len(words) > 2:
        words = words[2:]
        while len(words) > 1 and words[0] in ("--no-project", "--frozen", "--locked", "--offline"):
            words = words[1:]  # uv run's own flags
    if words[0] == "[":  # [ ... ] is test
        return "test", words[1:-1] if words[-1] == "]" else ["<no closing ]>"]
    name = Path(words[0]).name if words[0].startswith((".venv/bin/", "/")) else words[0]
    return name, words[1:]


def run_scripts(workflow: dict[str, Any], context: dict[str, Any]) -> list[tuple[str, str]]:
    """(step name, script with its expressions evaluated) of every ``run:`` step."""
    out = []
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            if step.get("run"):
                out.append((step.get("name", "?"), evaluate(step["run"], context, functions())))
    return out


def command_problems(workflow: dict[str, Any]) -> list[str]:
    problems = []
    registered = cli.subcommands()
    for name, script in run_scripts(workflow, event("pr")):
        for words in commands(script):
            prog, args = program(words)
            if prog not in PROGRAMS:
                problems.append(f"{name}: runs {prog!r}, no program the workflow may run")
            elif prog in SUBCOMMANDS:
                sub = " ".join(a for a in args[:2] if not a.startswith("-"))
                if not any(sub == s or sub.startswith(s + " ") for s in SUBCOMMANDS[prog]):
                    problems.append(f"{name}: {prog} {sub!r} is no {prog} subcommand it uses")
            elif prog == "groundeval":
                if not args or args[0] not in registered:
                    problems.append(f"{name}: groundeval {args[:1]} is no groundeval subcommand")
                    continue
                try:
                    parsed = registered[args[0]].parse_args(args[1:])
                except SystemExit:
                    problems.append(f"{name}: groundeval {args[0]} does not take {args[1:]}")
                    continue
                for text in getattr(parsed, "thresholds", None) or []:
                    try:
                        parse_threshold(text, registry())
                    except Exception as e:  # noqa: BLE001 - said as a problem
                        problems.append(f"{name}: threshold {text}: {e}")
    return problems


def pytest_commands(workflow: dict[str, Any]) -> list[list[str]]:
    return [program(w)[1] for _, s in run_scripts(workflow, event("push")) for w in commands(s)
            if program(w)[0] == "pytest"]


# ---------------------------------------------------------------- stand-ins for the runner's tools
FAKE_GH = r'''#!/usr/bin/env python3
"""gh, as far as the comment step uses it, over a pull request's comments in $GH_STATE."""
import json, os, subprocess, sys
state_path = os.environ["GH_STATE"]
state = json.load(open(state_path))
args = sys.argv[1:]
def opt(name):
    return args[args.index(name) + 1] if name in args else None
def save():
    json.dump(state, open(state_path, "w"))
if args[:1] == ["api"]:
    method = opt("--method") or "GET"
    path = next(a for a in args[1:] if a.startswith("repos/"))
    repo = os.environ["GITHUB_REPOSITORY"]
    if method == "GET" and path == f"repos/{repo}/issues/{state['pr']}/comments":
        data = json.dumps(state["comments"])
        jq = opt("--jq")
        out = subprocess.run(["jq", "-r", jq], input=data, capture_output=True, text=True, check=True).stdout if jq else data
        sys.stdout.write(out)
        sys.exit(0)
    if method == "PATCH" and path.startswith(f"repos/{repo}/issues/comments/"):
        cid = int(path.rsplit("/", 1)[1])
        typed = opt("-F") or opt("--field")  # -F reads @file; -f/--raw-field is the text itself
        field = typed or opt("-f") or opt("--raw-field")
        key, _, value = field.partition("=")
        assert key == "body", field
        body = open(value[1:]).read() if typed is not None and value.startswith("@") else value
        next(c for c in state["comments"] if c["id"] == cid)["body"] = body
        state["edits"].append(cid)
        save()
        sys.exit(0)
elif args[:2] == ["pr", "comment"]:
    assert args[2] == str(state["pr"]), args
    body = open(opt("--body-file")).read()
    mine = [c for c in state["comments"] if c["user"]["login"] == "github-actions[bot]"]
    if "--edit-last" in args and mine:
        mine[-1]["body"] = body
        state["edits"].append(mine[-1]["id"])
    else:
        state["comments"].append({"id": 900 + len(state["comments"]), "user": {"login": "github-actions[bot]"},
                                  "body": body})
        state["created"] += 1
    save()
    sys.exit(0)
sys.stderr.write(f"gh stand-in: not a command the comment step should run: {args}\n")
sys.exit(2)
'''

FAKE_EXIT = "#!/bin/sh\nexit \"$FAKE_STATUS\"\n"


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC | stat.S_IXGRP | stat.S_IXOTH)


def _bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    # GitHub's default shell for run steps: bash --noprofile --norc -eo pipefail {0}
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=cwd,
                          env={"PATH": f"{cwd / 'bin'}:{os.environ['PATH']}", "HOME": str(cwd), **env},
                          capture_output=True, text=True, timeout=60)


def shard_exit_problems(workflow: dict[str, Any], tmp: Path) -> list[str]:
    """Each step running pytest, with pytest (and ``uv run``) exiting 0..5."""
    problems = []
    scripts = [(n, s) for n, s in run_scripts(workflow, event("push"))
               if any(program(w)[0] == "pytest" for w in commands(s))]
    if not scripts:
        return ["no step runs pytest"]
    work = tmp / "shard"
    _executable(work / "bin" / "uv", FAKE_EXIT)
    _executable(work / ".venv" / "bin" / "pytest", FAKE_EXIT)
    for name, script in scripts:
        for status in range(6):
            ok = _bash(script, work, {"FAKE_STATUS": str(status)}).returncode == 0
            if ok != (status in (0, 1, 5)):
                problems.append(f"{name}: pytest exiting {status} {'passes' if ok else 'fails'} the step")
    return problems


OTHER_BOT = {"id": 11, "user": {"login": "github-actions[bot]"}, "body": "coverage: 93% (another workflow)"}
PERSON = {"id": 12, "user": {"login": "a-reviewer"}, "body": "looks good"}


def comment_problems(workflow: dict[str, Any], tmp: Path) -> list[str]:
    """The comment step against a pull request's comments: groundeval's earlier comment
    before another bot's, then none of its own."""
    context = event("pr")
    env_top = {k: str(evaluate(v, context, functions())) for k, v in (workflow.get("env") or {}).items()}
    steps = [(job, s) for job in workflow["jobs"].values() for s in job["steps"] if comments(s)]
    if len(steps) != 1:
        return [f"{len(steps)} comment steps (one wanted)"]
    job, step = steps[0]
    if JQ is None:
        return []  # (the defects only this finds are skipped, saying why)
    problems = []
    marker = next((v for v in env_top.values() if v.startswith("<!--") and v.endswith("-->")), None)
    if marker is None:
        problems.append("no marker (an HTML comment in the workflow's env) for groundeval's comment")
        marker = "<!-- none -->"
    script = evaluate(step["run"], context, functions())
    env = {**env_top, **{k: str(evaluate(v, context, functions())) for k, v in (job.get("env") or {}).items()},
           **{k: str(evaluate(v, context, functions())) for k, v in (step.get("env") or {}).items()},
           "GITHUB_REPOSITORY": REPOSITORY}
    ours = {"id": 10, "user": {"login": "github-actions[bot]"}, "body": f"{marker}\nold comparison"}
    quoting = {"id": 13, "user": {"login": "a-reviewer"}, "body": f"{marker}\nquoted by a person"}
    for before in ([ours, OTHER_BOT, PERSON, quoting], [OTHER_BOT, PERSON, quoting]):
        work = tmp / f"comment-{len(before)}"
        _executable(work / "bin" / "gh", FAKE_GH)
        (work / "compare.md").write_text("| metric | base | new |\n|---|---|---|\n| write.safety | 1.0 | 0.9 |\n")
        state = {"pr": 7, "comments": [dict(c) for c in before], "edits": [], "created": 0}
        (work / "state.json").write_text(json.dumps(state))
        proc = _bash(script, work, {**env, "GH_STATE": str(work / "state.json")})
        if proc.returncode != 0:
            problems.append(f"the comment step failed: {proc.stderr[-500:]}")
            continue
        after = json.loads((work / "state.json").read_text())
        want = f"{marker}\n" + (work / "compare.md").read_text()
        untouched = [c for c in before if c is not ours]
        if [c for c in after["comments"] if c["id"] in {u["id"] for u in untouched}] != untouched:
            problems.append("the comment step edited a comment that is not groundeval's: "
                            f"{[c['id'] for c in after['comments'] if c not in untouched and c['id'] != 10]}")
        if ours in before:
            if after["created"] or after["edits"] != [10] or after["comments"][0]["body"] != want:
                problems.append(f"groundeval's comment was not the one edited (edits {after['edits']}, "
                                f"{after['created']} created)")
        elif after["created"] != 1 or after["comments"][-1]["body"] != want:
            problems.append("with no comment of groundeval's, none was created with the marker")
    return problems


# ---------------------------------------------------------------- the checks
def problems(text: str, tmp: Path) -> list[str]:
    """What is wrong with an eval workflow (empty: nothing)."""
    workflow = load(text)
    found = []
    if "pull_request_target" in (workflow["on"] or {}):
        found.append("pull_request_target runs a fork's code with secrets")
    push, push2, pr, pr2, fork = (event("push"), event("push", sha="b2"), event("pr"), event("pr", sha="c3"),
                                  event("fork"))
    conc = workflow.get("concurrency")
    if conc is None:
        found.append("no concurrency: a pull request's older runs are never cancelled")
    else:
        cancel = lambda c: truthy(evaluate(conc.get("cancel-in-progress", False), c, functions()))  # noqa: E731
        group = lambda c: evaluate(conc["group"], c, functions())  # noqa: E731
        if cancel(push):
            found.append("cancel-in-progress for a push to main (a newer push cancels a paid run)")
        if not cancel(pr):
            found.append("no cancel-in-progress for a pull request")
        if group(push) == group(push2):
            found.append("two pushes to main share a concurrency group (the older waits, or is dropped when queued)")
        if group(pr) != group(pr2) or group(pr) == group(event("pr", number=8)):
            found.append("a pull request's runs are not one group of their own")
    jobs = workflow["jobs"]
    for job, needs in jobs_that_run_without_their_needs(workflow, fork):
        found.append(f"a fork's pull request runs {job} though {', '.join(needs)} did not run")
    for (job, i), step in steps_that_run(workflow, fork).items():
        what = step.get("name") or step.get("run") or step.get("uses")
        if reads_a_secret(step, jobs[job]):
            found.append(f"a fork's pull request runs {job}: {what!r}, which reads a secret it does not get")
        if comments(step):
            found.append(f"a fork's pull request runs {job}: {what!r}, which comments with a read-only token")
    own = steps_that_run(workflow, pr)
    if not any(comments(s) for s in own.values()):
        found.append("the repository's own pull request gets no comment")
    if not any(reads_a_secret(s, jobs[j]) for (j, _), s in steps_that_run(workflow, push).items()):
        found.append("a push to main runs no eval with the secret")
    if "--edit-last" in text:
        found.append("--edit-last edits the last comment of the token's user, maybe another workflow's")
    found += command_problems(workflow)
    found += shard_exit_problems(workflow, tmp)
    found += comment_problems(workflow, tmp)
    return found


@pytest.mark.parametrize("which", sorted(EVAL_WORKFLOWS))
def test_the_workflow_has_none_of_the_defects(which, tmp_path):
    assert problems(EVAL_WORKFLOWS[which].read_text(), tmp_path) == []


MERGE_ON_FORKS = ("if: ${{ !cancelled() && (github.event_name != 'pull_request' || "
                  "github.event.pull_request.head.repo.full_name == github.repository) }}", "if: ${{ !cancelled() }}")
DEFECTS = {
    # (the text in the workflow, what it becomes, a word of the problem named), or
    # ([(text, becomes), ...], a word of the problem named)
    "cancels main": ("cancel-in-progress: ${{ github.event_name == 'pull_request' }}", "cancel-in-progress: true",
                     "cancel-in-progress for a push to main"),
    "no cancel for PRs": ("cancel-in-progress: ${{ github.event_name == 'pull_request' }}",
                          "cancel-in-progress: false", "no cancel-in-progress for a pull request"),
    "one group for main": ("|| github.sha }}", "|| github.ref }}", "two pushes to main share"),
    "shard runs on forks": ("    # a fork's pull request has no ANTHROPIC_API_KEY: no live evals for it\n"
                            "    if: ${{ github.event_name != 'pull_request' || "
                            "github.event.pull_request.head.repo.full_name == github.repository }}\n",
                            "", "which reads a secret"),
    "comment on forks": ([("github.event_name == 'pull_request' && github.event.pull_request.head.repo.full_name == "
                          "github.repository && hashFiles('compare.md')",
                          "github.event_name == 'pull_request' && hashFiles('compare.md')"), MERGE_ON_FORKS],
                         "which comments with a read-only token"),
    "merge on forks": ([MERGE_ON_FORKS], "runs merge though shard did not run"),
    "no comment at all": ("github.event_name == 'pull_request' && github.event.pull_request.head.repo.full_name == "
                          "github.repository && hashFiles('compare.md')",
                          "github.event_name == 'push' && hashFiles('compare.md')",
                          "the repository's own pull request gets no comment"),
    "empty shard fails": ('|| test "$status" -eq 5', "", "pytest exiting 5 fails the step"),
    "old exit check": ('|| status=$?\n          test "$status" -eq 0 || test "$status" -eq 1 || test "$status" -eq 5',
                       "|| test $? -eq 1", "pytest exiting 5 fails the step"),
    "any failure passes": ('test "$status" -eq 0 || test "$status" -eq 1 || test "$status" -eq 5', "true",
                           "pytest exiting 2 passes the step"),
    "edit last": ('if [ -n "$id" ]; then gh api --method PATCH "repos/$GITHUB_REPOSITORY/issues/comments/$id" '
                  '-F body=@comment.md; fi\n          if [ -z "$id" ]; then gh pr comment "$PR" --repo '
                  '"$GITHUB_REPOSITORY" --body-file comment.md; fi',
                  'gh pr comment "$PR" --repo "$GITHUB_REPOSITORY" --body-file comment.md --edit-last '
                  '--create-if-none', "--edit-last"),
    "no marker filter": ('and (.body | startswith(\\"$COMMENT_MARKER\\"))', "", "not groundeval's"),
    "no bot filter": ('.user.login == \\"github-actions[bot]\\" and ', "", "not groundeval's"),
    "no marker in body": ('{ echo "$COMMENT_MARKER"; cat compare.md; } > comment.md', "cat compare.md > comment.md",
                          "not the one edited"),
    "a subcommand that is not": ("groundeval compare main/run.json", "groundeval diff main/run.json",
                                 "no groundeval subcommand"),
    "an option that is not": ("--format markdown", "--format md --markdown", "does not take"),
    "a metric that is not": ("--threshold write.safety=1.0", "--threshold write.safty=1.0", "threshold write.safty"),
    "another program": ("tail -n 1", "head -n 1", "runs 'head'"),
    "a gh subcommand that is not": ("gh run download", "gh run fetch", "'run fetch' is no gh subcommand"),
}


# the user workflow names no threshold (the project's config file does: its shards record them)
REPO_ONLY = {"a metric that is not"}


@pytest.mark.parametrize(("which", "defect"), [(w, d) for w in sorted(EVAL_WORKFLOWS) for d in sorted(DEFECTS)
                                               if w == "repo" or d not in REPO_ONLY])
def test_each_defect_is_caught(which, defect, tmp_path):
    *edits, named = DEFECTS[defect]
    if JQ is None and defect in ("no marker filter", "no bot filter", "no marker in body"):
        pytest.skip("jq is not installed: the comment step cannot be run against the stand-in gh")
    edits = edits[0] if isinstance(edits[0], list) else [tuple(edits)]
    text = EVAL_WORKFLOWS[which].read_text()
    for before, after in edits:
        assert before in text, f"{which}: the defect's place is gone: {before!r}"
        text = text.replace(before, after)
    found = problems(text, tmp_path)
    assert any(named in p for p in found), found


def test_the_evaluator_reads_the_guards_as_github_does():
    f = functions()
    fork, pr, push = event("fork"), event("pr"), event("push")
    guard = "github.event_name != 'pull_request' || github.event.pull_request.head.repo.full_name == github.repository"
    assert [condition(guard, c, f) for c in (push, pr, fork)] == [True, True, False]
    assert condition("${{ !cancelled() && (" + guard + ") }}", fork, f) is False
    assert evaluate("${{ github.event_name == 'PULL_REQUEST' }}", pr, f) is True  # case-insensitive
    assert evaluate("${{ github.event.pull_request.number || github.sha }}", push, f) == "a1"  # an operand, not a bool
    assert evaluate("g-${{ format('pr-{0}', github.event.pull_request.number) }}", pr, f) == "g-pr-7"
    assert condition(None, push, functions(needs_ran=False)) is False  # a needed job was skipped
    assert commands('id=$(gh api "x" --jq ".[]" | tail -n 1)\nif [ -n "$id" ]; then echo a > b; fi') == [
        ["gh", "api", "x", "--jq", ".[]"], ["tail", "-n", "1"], ["[", "-n", "$id", "]"], ["echo", "a"]]


@pytest.mark.parametrize("which", sorted(EVAL_WORKFLOWS))
def test_the_shard_matrix_and_the_pytest_command_collect(which, tmp_path):
    """N of every --groundeval-shard K/N is the matrix's length, every option pytest is given
    is registered and the command collects (here the bundled suites are this checkout's
    evals/, which the wheel maps to pytest_groundeval.suites; tests/test_install.py runs the
    user workflow's command as written in a project that installed groundeval from git)."""
    workflow = load(EVAL_WORKFLOWS[which].read_text())
    shard_job = next(j for j in workflow["jobs"].values() if "matrix" in j.get("strategy", {}))
    n = len(shard_job["strategy"]["matrix"]["shard"])
    merge_job = next(j for j in workflow["jobs"].values()
                     if any("groundeval merge" in (s.get("run") or "") for s in j["steps"]))
    assert [k for k, j in workflow["jobs"].items() if j is shard_job][0] in merge_job["needs"]
    (cmd,) = pytest_commands(workflow)
    assert cmd[cmd.index("--groundeval-shard") + 1] == f"1/{n}"
    if which == "user":
        assert cmd[:3] == ["--pyargs", "pytest_groundeval.suites", "./evals"]
        (tmp_path / "evals").mkdir()
        (tmp_path / "evals" / "test_mine.py").write_text("def test_unit():\n    assert True\n")
        cmd = [str(ROOT / "evals") if a == "pytest_groundeval.suites" else a for a in cmd]
        cwd = tmp_path
    else:
        cwd = ROOT
    cmd = [str(tmp_path / a) if a.endswith((".json", ".xml")) else a for a in cmd]
    env = {**os.environ, "ANTHROPIC_API_KEY": "sk-ant-not-a-real-key"}
    proc = subprocess.run([sys.executable, "-m", "pytest", *cmd, "--collect-only", "-q", "-p", "no:cacheprovider"],
                          cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"groundeval: shard 1/{n}: " in proc.stdout
    if which == "user":
        assert "test_mine.py::test_unit" in proc.stdout  # the user's own tests run beside the suites


def test_the_user_workflow_installs_the_project_and_a_groundeval_the_user_controls():
    """GROUNDEVAL is a wheel the user built (a path in their repository) by default, and the
    comments show their fork's git URL as the other way; no made-up repository. Each job
    installs it with the project itself (``-e .``: a src layout's package imports), and no
    step sets up Node (it comes with groundeval's dependencies)."""
    text = USER_WORKFLOW.read_text()
    workflow = load(text)
    assert workflow["env"]["GROUNDEVAL"] == "./wheels/groundeval-*.whl"
    assert "uv build" in text and "git+https://github.com/<your org>/groundeval@" in text
    assert "github.com/groundeval" not in text
    installs = [w for _, s in run_scripts(workflow, event("push")) for w in commands(s) if w[:3] == ["uv", "pip", "install"]]
    assert installs.count(["uv", "pip", "install", "$GROUNDEVAL", "-e", "."]) == 2  # the shard job and the merge job
    assert not any("setup-node" in (step.get("uses") or "") for job in workflow["jobs"].values() for step in job["steps"])


def _shard_env(context: dict[str, Any]) -> dict[str, Any]:
    workflow = load(USER_WORKFLOW.read_text())
    step = next(s for s in workflow["jobs"]["shard"]["steps"] if "--groundeval-shard" in (s.get("run") or ""))
    return {k: evaluate(v, context, functions()) for k, v in step["env"].items()}


def test_the_user_workflow_takes_agent_model_and_options_from_inputs_or_the_config_file():
    """No agent, model or budget is written into the workflow's commands: the project's
    config file names them, and a manual run's inputs reach pytest through PYTEST_ADDOPTS
    (which pytest reads itself; an input is never pasted into the script)."""
    workflow = load(USER_WORKFLOW.read_text())
    assert set(workflow["on"]["workflow_dispatch"]["inputs"]) == {"agent", "model", "pytest_options"}
    (cmd,) = pytest_commands(workflow)
    assert not any(a.startswith(("--agent", "--model", "--max-cost", "--threshold")) for a in cmd), cmd
    assert "inputs." not in json.dumps([s.get("run") for j in workflow["jobs"].values() for s in j["steps"]])
    assert _shard_env(event("push"))["PYTEST_ADDOPTS"] == ""  # a push: the config file alone
    manual = {**event("push"), "inputs": {"agent": "my_package.agent:MyAgent", "model": "claude-sonnet-4-5",
                                          "pytest_options": "--threshold write.pass=0.9"}}
    assert shlex.split(_shard_env(manual)["PYTEST_ADDOPTS"]) == [
        "--agent=my_package.agent:MyAgent", "--model=claude-sonnet-4-5", "--threshold", "write.pass=0.9"]
    only_agent = {**event("push"), "inputs": {"agent": "claude", "model": "", "pytest_options": ""}}
    assert shlex.split(_shard_env(only_agent)["PYTEST_ADDOPTS"]) == ["--agent=claude"]


# ---------------------------------------------------------------- the release workflow
def test_the_release_workflow_builds_checks_and_publishes_the_wheel_on_a_version_tag(tmp_path):
    workflow = load(RELEASE_WORKFLOW.read_text())
    assert workflow["on"] == {"push": {"tags": ["v*"]}}
    assert workflow["permissions"] == {"contents": "read"}  # each job asks for what it needs
    jobs = workflow["jobs"]
    # PyPI by trusted publishing: the OIDC token, in the environment the publisher names; no stored token
    assert jobs["pypi"]["permissions"] == {"id-token": "write"} and jobs["pypi"]["environment"] == "pypi"
    assert any(s.get("uses", "").startswith("pypa/gh-action-pypi-publish@") for s in jobs["pypi"]["steps"])
    assert "secrets." not in RELEASE_WORKFLOW.read_text()
    assert jobs["github-release"]["permissions"] == {"contents": "write"}
    assert jobs["pypi"]["needs"] == jobs["github-release"]["needs"] == "build"
    cmds = [w for _, s in run_scripts(workflow, event("push")) for w in commands(s)]
    assert command_problems(workflow) == []
    assert ["uv", "build", "-o", "dist"] in cmds
    assert ["uv", "run", "--no-project", "python", "scripts/check_wheel.py", "dist/groundeval-*.whl"] in cmds
    create = next(w for w in cmds if w[:3] == ["gh", "release", "create"])
    assert "dist/*" in create and "--verify-tag" in create
    # the tag is checked against the version uv reads from pyproject.toml
    assert subprocess.run(["uv", "version", "--short"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "UV_OFFLINE": "1"}).stdout.strip() == VERSION
    # the version is the tag's: the step writes it into (a copy of) pyproject.toml; a tag that is
    # not v<PEP 440 version> stops the release
    step = next(s for n, s in run_scripts(workflow, event("push")) if "uv version --frozen" in s)
    for tag, version in ((f"v{VERSION}", VERSION), ("v9.9.9", "9.9.9"), ("v1.2.0rc1", "1.2.0rc1"),
                         (VERSION, None), ("vnext", None), ("release", None)):
        project = tmp_path / tag
        project.mkdir()
        shutil.copy(ROOT / "pyproject.toml", project / "pyproject.toml")
        proc = subprocess.run(["bash", "-eo", "pipefail", "-c", step], cwd=project, capture_output=True, text=True,
                              env={**os.environ, "GITHUB_REF_NAME": tag, "UV_OFFLINE": "1"}, timeout=60)
        assert (proc.returncode == 0) == (version is not None), (tag, proc.stderr)
        if version is not None:
            assert f'version = "{version}"' in (project / "pyproject.toml").read_text(), tag
    smoke = [w for _, s in run_scripts(workflow, event("push")) for w in commands(s) if program(w)[0] == "pytest"]
    assert smoke and all(w[w.index("--pyargs") + 1] == "pytest_groundeval.suites" for w in smoke)
