#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The man pages as `make install` puts them in a DESTDIR: each of
# preduced(8), preduced.conf(5), preducectl(1), preduce-sim(1),
# preduce-trainer(1), preduce-run(1) and libpreduce(3) is there, names
# the release of preduce.h in its header line, and renders with `groff -man -ww -z` without a single warning (also as
# man(1) sets it for terminals 60, 80 and 120 columns wide);
# preduced.conf(5) has an entry for every key `preduced -T` prints, no
# more, so the page and the config table cannot drift apart; and every
# function the installed libpreduce.so.1 exports is in libpreduce(3)'s
# synopsis and is a page of its own that man(1) finds (a .so link). Root is not
# needed; groff comes with groff-base. Bounded: about 3 s.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/ops/lib.sh

BUILD=${BUILD:-build}
MAKE=${MAKE:-make}
T=$(mktemp -d /tmp/preduce-man.XXXXXX)
trap 'rm -rf "$T"' EXIT

if ! command -v groff >/dev/null; then
    skip man "groff missing (apt-get install groff-base)"
    finish
    exit
fi
if ! $MAKE --no-print-directory -s BUILD="$BUILD" install DESTDIR="$T" \
    PREFIX=/usr >"$T/install.log" 2>&1; then
    fail install "$(tail -n 20 "$T/install.log")"
    finish
    exit
fi

M=$T/usr/share/man
# The release the pages should name: preduce.h's major.minor.
release=$(awk '/define PREDUCE_VERSION_MAJOR/ { a = $3 }
    /define PREDUCE_VERSION_MINOR/ { b = $3 } END { print a "." b }' \
    client/include/preduce.h)
for page in man8/preduced.8 man5/preduced.conf.5 man1/preducectl.1 \
    man1/preduce-sim.1 man1/preduce-trainer.1 man1/preduce-run.1 \
    man3/libpreduce.3; do
    if [ ! -f "$M/$page" ]; then
        fail "$page installed" "no $M/$page"
        continue
    fi
    th=$(grep -m 1 '^\.TH ' "$M/$page")
    if [[ "$th" == *"\"preduce $release\""* ]]; then
        pass "$page is of preduce $release"
    else
        fail "$page is of preduce $release" "its header: $th"
    fi
    out=$(groff -man -ww -z "$M/$page" 2>&1)
    for w in 58 78 118; do
        out+=$(groff -man -ww -z -Tutf8 -rLL=${w}n "$M/$page" 2>&1)
    done
    if [ -z "$out" ]; then
        pass "$page renders without warnings"
    else
        fail "$page renders without warnings" "$out"
    fi
done

# Every key of the table (-T writes "name = value" under [section]) is an
# entry "section.name = ..." of the page, and the page has no other.
keys=$("$BUILD/preduced" -T | awk '/^\[/ { s = substr($0, 2, length($0) - 2) "." }
    /^[a-z_]+ =/ { print s $1 }' | sort)
entries=$(awk '/^\.T[PQ]$/ { getline; print }' "$M/man5/preduced.conf.5" |
    sed -n 's/^\\fB\([a-z_.]*\)\\fR = .*/\1/p' | sort)
n=$(wc -l <<<"$keys")
if [ -n "$keys" ] && [ "$keys" = "$entries" ]; then
    pass "preduced.conf(5) documents the $n keys of preduced -T"
else
    fail "preduced.conf(5) documents every key" \
        "$(diff <(echo "$keys") <(echo "$entries"))"
fi

# Every function the installed library exports has a page (a .so link to
# libpreduce(3), in whose synopsis it is), found by man(1).
syms=$(nm -D --defined-only "$T/usr/lib/libpreduce.so.1" |
    awk '{ sub(/@.*/, "", $3); if ($3 ~ /^preduce_/) print $3 }' | sort)
missing=
for f in $syms; do
    grep -q "^\.BI \".*[ *]$f(" "$M/man3/libpreduce.3" ||
        missing+=" $f (not in the synopsis)"
    if command -v man >/dev/null; then
        [ "$(MANPATH=$M man -w "$f" 2>/dev/null)" = "$M/man3/libpreduce.3" ] ||
            missing+=" $f (man -w: $(MANPATH=$M man -w "$f" 2>&1))"
    else
        [ -f "$M/man3/$f.3" ] || missing+=" $f (no page)"
    fi
done
n=$(wc -w <<<"$syms")
if [ "$n" -gt 0 ] && [ -z "$missing" ]; then
    pass "the $n functions libpreduce.so.1 exports: man FUNCTION is libpreduce(3)"
else
    fail "a page per exported function" "${missing:-no symbols}"
fi
finish
