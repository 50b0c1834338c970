#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# make check-format's licence check: the project is MIT (LICENSE), and
# every source file the repository tracks says so in an
# SPDX-License-Identifier line within its first three lines, so that a
# file copied out of the tree keeps its licence. Fails naming the files
# without one. Outside a git checkout (a release tarball) it checks
# nothing and says so.
set -uo pipefail
cd "${1:-$(dirname "$0")/..}" || exit 2

if ! files=$(git ls-files 2>/dev/null); then
    echo "check-license: not a git checkout: skipped"
    exit 0
fi
grep -q "^MIT License" LICENSE || {
    echo "check-license: LICENSE is not the MIT licence" >&2
    exit 1
}
missing=()
n=0
while IFS= read -r f; do
    case "$f" in
    tests/fuzz/seeds/*) continue ;;
    *.c | *.h | *.cc | *.py | *.sh | *.awk | *.proto | *.sbatch | *.yaml | \
        *.toml | *.cfg | \
        Makefile | debian/rules | .ci/run) ;;
    *) continue ;;
    esac
    n=$((n + 1))
    head -n 3 "$f" | grep -q "SPDX-License-Identifier: MIT" || missing+=("$f")
done <<<"$files"
if [ ${#missing[@]} -gt 0 ]; then
    printf 'check-license: no "SPDX-License-Identifier: MIT" line: %s\n' \
        "${missing[@]}" >&2
    exit 1
fi
echo "check-license: $n source files, each with its SPDX line"
