#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# make check-format's commit check (CONTRIBUTING.md, "Commits"): every
# commit after BASE has a subject "part: what changed" of at most 72
# characters, then a blank line and a body (the why, the figures).
#
#   tests/check-commits.sh [BASE [DIR]]
#     BASE: a commit; default $COMMITS_BASE, else the rule's first commit
#     DIR: the checkout (default: this one)
#
# Merges are not checked. Outside a git checkout (a source package) it
# says so and passes: there are no commits to check.
set -uo pipefail
cd "${2:-$(dirname "$0")/..}" || exit 2

# The commits before this one predate the rule; history is not rewritten.
RULE_START=a14ed6694bd13f212e9517118db91d4b1812cc6f
base=${1:-${COMMITS_BASE:-$RULE_START}}

if ! git rev-parse --git-dir >/dev/null 2>&1; then
    echo "check-commits: not a git checkout, no commits to check"
    exit 0
fi
if ! git rev-parse -q --verify "$base^{commit}" >/dev/null; then
    # A shallow clone may lack the rule's first commit: check what it has.
    echo "check-commits: $base is not in this clone; checking the last 20" >&2
    base=$(git rev-list --max-count=21 HEAD | tail -n 1)
fi

bad=0
n=0
for c in $(git rev-list --no-merges "$base..HEAD"); do
    n=$((n + 1))
    subject=$(git log -1 --format=%s "$c")
    blank=$(git log -1 --format=%B "$c" | sed -n 2p)
    body=$(git log -1 --format=%b "$c" | grep -c '[^[:space:]]')
    short=$(git rev-parse --short "$c")
    if [ "${#subject}" -gt 72 ]; then
        echo "check-commits: $short: subject of ${#subject} characters (at most 72): $subject" >&2
        bad=$((bad + 1))
    fi
    # "part: ...", or "part, part: ..." for a change that spans two.
    if ! [[ "$subject" =~ ^[A-Za-z0-9_.+/-]+(,\ ?[A-Za-z0-9_.+/-]+)*:\ [^[:space:]] ]]; then
        echo "check-commits: $short: subject not \"part: what changed\": $subject" >&2
        bad=$((bad + 1))
    fi
    if [ -n "$blank" ] || [ "$body" -eq 0 ]; then
        echo "check-commits: $short: no body after a blank line (say why, and the figures)" >&2
        bad=$((bad + 1))
    fi
done
if [ "$bad" -gt 0 ]; then
    echo "check-commits: $bad problem(s) in $n commit(s) since ${base:0:12}" >&2
    exit 1
fi
echo "check-commits: $n commit(s) since ${base:0:12}: subjects and bodies in form"
