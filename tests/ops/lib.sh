# Shared by the tests/ops/*.sh suites: cases counted as they run, and
# Check's closing line at the end ("100%: Checks: N, Failures: F, Errors:
# 0"), which CI reads. A case that cannot run here is skipped with its
# reason printed and is not counted.
#
#   pass NAME            a case that held
#   fail NAME WHY        a case that did not (the suite exits 1 at the end)
#   skip NAME WHY        a case not run
#   check NAME CMD...    pass if CMD succeeds, else fail with its output
#   finish               the summary line; exit status 1 on any failure
#   wait_log FILE TEXT   waits up to 5 s for TEXT in FILE

OPS_CHECKS=0
OPS_FAILS=0

pass() { OPS_CHECKS=$((OPS_CHECKS + 1)); echo "ok: $1"; }

fail() {
    OPS_CHECKS=$((OPS_CHECKS + 1))
    OPS_FAILS=$((OPS_FAILS + 1))
    echo "FAIL: $1: $2"
}

skip() { echo "skipped: $1: $2"; }

check() {
    local name=$1 out
    shift
    if out=$("$@" 2>&1); then pass "$name"; else fail "$name" "$out"; fi
}

finish() {
    local pct=100
    [ "$OPS_CHECKS" -gt 0 ] &&
        pct=$(((OPS_CHECKS - OPS_FAILS) * 100 / OPS_CHECKS))
    echo "$pct%: Checks: $OPS_CHECKS, Failures: $OPS_FAILS, Errors: 0"
    [ "$OPS_FAILS" -eq 0 ]
}

# A node daemon's socket file exists from its bind, a moment before it
# listens: wait for the line it logs once it does.
wait_log() {
    for _ in $(seq 100); do
        grep -qF -- "$2" "$1" 2>/dev/null && return 0
        sleep 0.05
    done
    echo "no \"$2\" in $1 within 5 s" >&2
    return 1
}
