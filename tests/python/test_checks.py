# SPDX-License-Identifier: MIT
"""make check-format's own checks catch what they are for: a planted
shellcheck warning, a planted Python lint finding, and commits that break
the commit rules (CONTRIBUTING.md), each in a scratch git repository."""

import os
import shutil
import subprocess

import pytest

from cluster import TOP

LINT = os.path.join(TOP, "tests", "check-lint.sh")
COMMITS = os.path.join(TOP, "tests", "check-commits.sh")

pytestmark = pytest.mark.skipif(shutil.which("git") is None,
                                reason="needs git")


def git(repo, *args):
    """Runs git in repo with a fixed identity; returns its stdout."""
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    return subprocess.run(["git", "-C", str(repo), *args], env=env,
                          check=True, capture_output=True,
                          text=True).stdout.strip()


def commit(repo, message):
    """Commits a new file with the given message; returns the hash."""
    n = len(list(repo.iterdir()))
    (repo / f"f{n}").write_text(message)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path):
    """An empty git repository with one first commit."""
    git(tmp_path, "init", "-q")
    commit(tmp_path, "base: the first commit\n\nWhy it is there.")
    return tmp_path


def run(*cmd):
    return subprocess.run(list(cmd), capture_output=True, text=True)


@pytest.mark.skipif(shutil.which("shellcheck") is None
                    or shutil.which("pyflakes3") is None,
                    reason="needs shellcheck and pyflakes3")
def test_lint_catches_planted_findings(repo):
    """A clean script passes; a cd without a fallback (SC2164) and an unused
    import each fail check-lint, named by file."""
    (repo / "ok.sh").write_text("#!/bin/sh\necho \"$1\"\n")
    git(repo, "add", "-A")
    r = run(LINT, str(repo))
    assert r.returncode == 0, r.stderr
    assert "shellcheck: 1 scripts clean" in r.stdout

    (repo / "bad.sh").write_text("#!/bin/bash\ncd /nonexistent\nrm -f x\n")
    (repo / "bad.py").write_text("import os\n")
    git(repo, "add", "-A")
    r = run(LINT, str(repo))
    assert r.returncode == 1
    assert "bad.sh:2:" in r.stderr and "SC2164" in r.stderr
    assert "bad.py:1:" in r.stderr and "'os' imported but unused" in r.stderr


def test_commits_in_form_pass(repo):
    base = git(repo, "rev-parse", "HEAD")
    commit(repo, "engine: the stash in its own file\n\nWhy, and figures.")
    commit(repo, "node, sched: both sides say it\n\nWhy.")
    r = run(COMMITS, base, str(repo))
    assert r.returncode == 0, r.stderr
    assert "2 commit(s)" in r.stdout


@pytest.mark.parametrize("message, complaint", [
    ("engine: " + "x" * 70 + "\n\nA body.", "subject of 78 characters"),
    ("moved the stash out of engine.c\n\nA body.",
     "not \"part: what changed\""),
    ("engine: the stash in its own file", "no body"),
    ("engine: the stash\nstraight on\n\nA body.", "no body"),
])
def test_commits_out_of_form_fail(repo, message, complaint):
    """A long subject, one without "part:", and a missing body each fail,
    naming the commit; commits before the base are not checked."""
    commit(repo, "x" * 100 + "\n\nBefore the base: not checked.")
    base = git(repo, "rev-parse", "HEAD")
    bad = commit(repo, message)
    r = run(COMMITS, base, str(repo))
    assert r.returncode == 1
    assert complaint in r.stderr
    assert bad[:7] in r.stderr
    assert "1 problem(s) in 1 commit(s)" in r.stderr
