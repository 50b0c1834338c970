#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# make check-format's lint: shellcheck (severity warning and above) on every
# shell script the repository tracks, and pyflakes on every Python file.
# Fails naming each finding. Outside a git checkout (a release tarball) it
# checks nothing and says so.
#
# Shell scripts: *.sh, and any other tracked file whose first line is a
# sh/bash/dash/ksh shebang (.ci/run, client/examples/slurm/preduce.sbatch).
# Files only ever sourced (client/examples/cluster.sh, tests/ops/lib.sh)
# name their shell in a "# shellcheck shell=bash" directive. shellcheck
# runs from the top of the tree with -x, so it follows the files a script
# sources and sees the variables it sets for them; "# shellcheck source="
# directives are relative to the top of the tree.
# Python: *.py, and any other tracked file with a Python shebang
# (client/python/preduce-run.in, "#!@PYTHON@" until make fills it in).
# Nothing is excluded; a file in the index but deleted from the work tree
# is not there to check.
set -uo pipefail
cd "${1:-$(dirname "$0")/..}" || exit 2

if ! files=$(git ls-files 2>/dev/null); then
    echo "check-lint: not a git checkout: skipped"
    exit 0
fi
for tool in shellcheck pyflakes3; do
    command -v "$tool" >/dev/null || {
        echo "check-lint: $tool not installed:" \
            "apt-get install $tool (tests/install-deps.sh installs it)" >&2
        exit 1
    }
done

sh=()
py=()
while IFS= read -r f; do
    [ -f "$f" ] || continue
    case "$f" in
    *.sh) sh+=("$f") ;;
    *.py) py+=("$f") ;;
    *)
        first=$(head -n 1 -- "$f" 2>/dev/null | tr -d '\0')
        if [[ $first =~ ^#!.*[/[:space:]](ba|da|k)?sh([[:space:]]|$) ]]; then
            sh+=("$f")
        elif [[ ${first,,} =~ ^#!.*python ]]; then
            py+=("$f")
        fi
        ;;
    esac
done <<<"$files"

rc=0
# One line per finding: file:line:col: severity: message [SCnnnn].
if out=$(shellcheck -x -S warning -f gcc -- "${sh[@]}" 2>&1); then
    echo "check-lint: shellcheck: ${#sh[@]} scripts clean"
else
    printf '%s\n' "$out" >&2
    echo "check-lint: shellcheck: $(cut -d: -f1 <<<"$out" | sort -u |
        wc -l) of ${#sh[@]} scripts have findings (shellcheck -S warning)" >&2
    rc=1
fi
if out=$(pyflakes3 -- "${py[@]}" 2>&1); then
    echo "check-lint: pyflakes: ${#py[@]} files clean"
else
    printf '%s\n' "$out" >&2
    echo "check-lint: pyflakes: $(cut -d: -f1 <<<"$out" | sort -u |
        wc -l) of ${#py[@]} files have findings" >&2
    rc=1
fi
exit $rc
