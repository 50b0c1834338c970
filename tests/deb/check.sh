#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Debian package as an administrator gets it (root only):
#
#  1. dpkg-buildpackage -us -uc -b, with debian/rules' make check-unit, in
#     a scratch copy of the tree (the files git tracks or would add;
#     outside git, all but build/), so the worktree stays clean; the four
#     packages (and dbgsym) made;
#  2. lintian on the .changes: no error (warnings and infos printed);
#  3. the .debs installed with dpkg -i inside a systemd booted by
#     systemd-nspawn on an overlay of this machine's tree (writes go to a
#     tmpfs; see tests/ops/nspawn.sh): dpkg -L of each package holds what
#     it should, the config a conffile, user preduce made by the
#     postinst, neither unit enabled or started;
#  4. both units started with the shipped config, unchanged; two clients
#     of the installed python3-preduce reduce together through the
#     installed libpreduce.so.1 (1 and 3 make 2), preduce.torch imports
#     (when python3-torch is there), and a program built with pkg-config
#     against the installed libpreduce-dev reduces;
#  5. a changed conffile survives a reinstall, which restarts the running
#     node (the upgrade path); dpkg -r stops both units and keeps the
#     conffile; dpkg -P removes it and every file of the packages, and
#     keeps user preduce (Debian leaves system users in place).
#
# Each case is counted; Check's closing line at the end. Skipped, saying
# why, without root or systemd-nspawn. Missing build tools (debhelper,
# dh-python, lintian, fakeroot) are installed from Debian first. Bounded:
# the build under 6 min (under 1 min here, 2 cores), every command in
# the container under timeout; about 1 min in all (make check-deb: 8 at
# most).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/ops/lib.sh

if [ "$(id -u)" -ne 0 ]; then
    skip deb "needs root (dpkg in a container, mounts); run as root to test"
    finish
    exit
fi
if ! command -v systemd-nspawn >/dev/null; then
    skip deb "systemd-nspawn missing (apt-get install systemd-container)"
    finish
    exit
fi

TOOLS=(dpkg-dev debhelper dh-python fakeroot lintian)
missing=()
for p in "${TOOLS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
        grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -q \
        --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
        { fail setup "apt-get install ${missing[*]} failed"; finish; exit; }
fi

T=$(mktemp -d /tmp/preduce-deb.XXXXXX)
cleanup() { ct_stop "$T"; }
trap cleanup EXIT

# 1. The build, in a copy: debian/rules clean and the build write only
# there.
S=$T/src/preduce
mkdir -p "$S"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard |
        xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
        tar --null -T - -cf - | tar -xf - -C "$S"
else
    tar --exclude=./build --exclude=./.git -cf - . | tar -xf - -C "$S"
fi
t0=$(date +%s)
if (cd "$S" && timeout 360 dpkg-buildpackage -us -uc -b -j2) \
    >"$T/build.log" 2>&1; then
    pass "dpkg-buildpackage -us -uc -b ($(($(date +%s) - t0)) s)"
else
    fail "dpkg-buildpackage" "$(tail -n 30 "$T/build.log")"
    finish
    exit
fi
if [[ " ${DEB_BUILD_OPTIONS:-} " == *" nocheck "* ]]; then
    skip "make check-unit in the build" "DEB_BUILD_OPTIONS has nocheck"
elif grep -q "100%: Checks: " "$T/build.log" &&
    ! grep -q "Failures: [1-9]\|Errors: [1-9]" "$T/build.log"; then
    pass "make check-unit ran in the build ($(grep -c "100%: Checks: " \
        "$T/build.log") suites)"
else
    fail "make check-unit in the build" "no summary lines in the log"
fi
DEBS=()
for p in preduce libpreduce1 libpreduce-dev python3-preduce; do
    f=$(ls "$T/src/${p}_"*.deb 2>/dev/null | head -1)
    [ -n "$f" ] && DEBS+=("$f")
done
if [ ${#DEBS[@]} -eq 4 ]; then
    pass "4 binary packages: $(cd "$T/src" && ls ./*.deb | tr '\n' ' ')"
else
    fail "4 binary packages" "$(ls "$T/src")"
    finish
    exit
fi

# 2. lintian: errors fail, the rest is printed. Its note about running
# as root is dropped.
changes=$(ls "$T/src/"*.changes | head -1)
timeout 300 lintian --pedantic -I --fail-on error "$changes" \
    >"$T/lintian.log" 2>&1
lrc=$?
grep -v "^running with root privileges" "$T/lintian.log" | sed 's/^/  lintian: /'
nerr=$(grep -c "^E: " "$T/lintian.log")
nwarn=$(grep -c "^W: " "$T/lintian.log")
if [ "$lrc" -eq 0 ] && [ "$nerr" -eq 0 ]; then
    pass "lintian: no errors ($nwarn warnings)"
else
    fail "lintian" "exit $lrc, $nerr errors"
fi

# 3. A systemd container on an overlay of / (as tests/ops/nspawn.sh).
if ! ct_overlay "$T" 1g; then
    fail "overlay of /" "mount failed"
    finish
    exit
fi
M=$T/merged
mkdir -p "$M/root/debs"
# A Docker image's policy-rc.d (exit 101) forbids every start and stop by
# maintainer scripts; a machine the package is for has none.
rm -f "$M/usr/sbin/policy-rc.d"
cp "${DEBS[@]}" "$M/root/debs/"
if ! ct_boot "$T" "prd$$"; then
    fail "the container boots" "$(tail -n 30 "$T/nspawn.log")"
    finish
    exit
fi
# The container's own environment, not this shell's (a PATH with
# /usr/local or pyenv shims would pick other programs than the packages').
ct() {
    ct_enter 120 env -i HOME=/root LANG=C.UTF-8 \
        PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"
}
ctenv() { ct env DEBIAN_FRONTEND=noninteractive "$@"; }

# The postinst is to make the user: one this machine has (a make install
# and systemd-sysusers here) is removed from the container first.
if ct getent passwd preduce >/dev/null || ct getent group preduce >/dev/null
then
    echo "removing the host's user preduce from the container"
    ct userdel preduce 2>/dev/null
    ct groupdel preduce 2>/dev/null
fi
debs=()
for f in "${DEBS[@]}"; do debs+=("/root/debs/$(basename "$f")"); done
if out=$(ctenv dpkg -i "${debs[@]}" 2>&1 </dev/null); then
    pass "dpkg -i of the 4 packages in a systemd container"
else
    fail "dpkg -i" "$out"
    finish
    exit
fi

MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
# has PACKAGE PATH...: every PATH is in dpkg -L PACKAGE.
has() {
    local p=$1 list miss=
    shift
    list=$(ct dpkg -L "$p")
    for f; do grep -qxF "$f" <<<"$list" || miss="$miss $f"; done
    if [ -z "$miss" ]; then
        pass "dpkg -L $p: $# paths"
    else
        fail "dpkg -L $p" "missing:$miss"
    fi
}
has preduce /usr/bin/preduced /usr/bin/preducectl /usr/bin/preduce-sim \
    /lib/systemd/system/preduced.service \
    /lib/systemd/system/preduced-scheduler.service \
    /usr/lib/sysusers.d/preduce.conf /etc/preduce/preduced.conf \
    /usr/share/man/man8/preduced.8.gz /usr/share/man/man5/preduced.conf.5.gz \
    /usr/share/man/man1/preducectl.1.gz /usr/share/man/man1/preduce-sim.1.gz \
    /usr/share/man/man1/preduce-trainer.1.gz /usr/bin/preduce-trainer
has libpreduce1 "/usr/lib/$MA/libpreduce.so.1"
has libpreduce-dev /usr/include/preduce.h "/usr/lib/$MA/libpreduce.so" \
    "/usr/lib/$MA/pkgconfig/preduce.pc" /usr/share/man/man3/libpreduce.3.gz \
    /usr/share/man/man3/preduce_reduce.3.gz
has python3-preduce /usr/lib/python3/dist-packages/preduce/__init__.py \
    /usr/lib/python3/dist-packages/preduce/torch.py
# Lists taken whole: grep -q on a pipe under pipefail can see its writer
# die of SIGPIPE.
plist=$(ct dpkg -L preduce)
if [ "$(ct dpkg -L libpreduce1 | grep -c '\.so')" -eq 1 ] &&
    ! grep -q "/include/\|\.so\|dist-packages" <<<"$plist"; then
    pass "the library alone in libpreduce1, nothing of the others in preduce"
else
    fail "package split" "$(ct dpkg -L libpreduce1; ct dpkg -L preduce)"
fi
if ct dpkg-query -W -f='${Conffiles}\n' preduce |
    grep -q "^ /etc/preduce/preduced.conf [0-9a-f]\{32\}$"; then
    pass "/etc/preduce/preduced.conf is a conffile"
else
    fail "conffile" "$(ct dpkg-query -W -f='${Conffiles}\n' preduce)"
fi
if ct getent passwd preduce | grep -q ':/usr/sbin/nologin$' &&
    ct getent group preduce >/dev/null; then
    pass "the postinst made user and group preduce (systemd-sysusers)"
else
    fail "user preduce" "$(ct getent passwd preduce)"
fi
state=$(ct systemctl is-enabled preduced preduced-scheduler | tr '\n' ' ')
active=$(ct systemctl is-active preduced preduced-scheduler | tr '\n' ' ')
if [ "$state" = "disabled disabled " ] &&
    [ "$active" = "inactive inactive " ]; then
    pass "neither unit enabled nor started by the install"
else
    fail "units after install" "enabled: $state; active: $active"
fi

# 4. The shipped config, as the package installed it.
sum=$(ct dpkg-query -W -f='${Conffiles}\n' preduce | awk '{print $2}')
if [ "$(ct md5sum /etc/preduce/preduced.conf | cut -d' ' -f1)" = "$sum" ] &&
    ct systemctl start preduced-scheduler preduced &&
    ct systemctl is-active -q preduced-scheduler preduced; then
    pass "both units start with the shipped config"
else
    fail "both units start" "$(ct journalctl --no-pager -n 30 \
        -u preduced -u preduced-scheduler)"
fi
ct useradd -M -N -s /usr/sbin/nologin -G preduce alice
as_alice() {
    ct setpriv --reuid=alice --regid=users --init-groups "$@"
}
# Two clients in one process, both connected before either reduces, so
# that the scheduler's allreduce policy puts both in the group.
mkdir -p "$M/srv/pdtest"
chmod 755 "$M/srv/pdtest"
cat >"$M/srv/pdtest/two.py" <<'PY'
import preduce

sock = "/run/preduce/preduced.sock"
with preduce.Client(sock, "py0") as c0, preduce.Client(sock, "py1") as c1:
    w0, w1 = c0.tensor(4096), c1.tensor(4096)
    w0[:], w1[:] = 1.0, 3.0
    h0, h1 = c0.reduce_start([w0]), c1.reduce_start([w1])
    r0, r1 = h0.wait(10000), h1.wait(10000)
    lib = [l.split()[-1] for l in open("/proc/self/maps") if "libpreduce" in l]
    print(preduce.__file__, lib[0], len(r0.members), len(r1.members),
          float(w0.min()), float(w0.max()), float(w1.min()), float(w1.max()))
PY
want="/usr/lib/python3/dist-packages/preduce/__init__.py \
/usr/lib/$MA/libpreduce.so.1 2 2 2.0 2.0 2.0 2.0"
if out=$(as_alice python3 /srv/pdtest/two.py 2>&1) && [ "$out" = "$want" ]; then
    pass "python3-preduce: 1 and 3 make 2 in a group of 2 ($out)"
else
    fail "python3-preduce reduces" "got: $out; want: $want"
fi
if ! ct python3 -c "import torch" 2>/dev/null; then
    skip "preduce.torch imports" "no torch here (python3-torch, recommended)"
elif out=$(ct python3 -c 'import preduce.torch; print(preduce.torch.__file__)' \
    2>&1) && [ "$out" = /usr/lib/python3/dist-packages/preduce/torch.py ]; then
    pass "preduce.torch imports with Debian's torch"
else
    fail "preduce.torch imports" "$out"
fi
cp tests/ops/hello.c "$M/srv/pdtest/hello.c"
if out=$(ct sh -c 'cc -o /srv/pdtest/hello /srv/pdtest/hello.c \
        $(pkg-config --cflags --libs preduce) && ldd /srv/pdtest/hello' 2>&1) &&
    grep -q "libpreduce.so.1 => \(/usr\)\?/lib/$MA/libpreduce.so.1 " <<<"$out"
then
    pass "a program built with pkg-config against libpreduce-dev"
else
    fail "pkg-config build" "$out"
fi
if out=$(as_alice /srv/pdtest/hello /run/preduce/preduced.sock c0 2 2 1 2>&1); then
    pass "it reduces through the installed library: $out"
else
    fail "the C program reduces" "$out"
fi

# 5. A changed conffile over a reinstall (the upgrade path: postinst
# configure with the old version), which restarts the running node.
pid0=$(ct systemctl show -p MainPID --value preduced)
echo "# changed by the administrator" >>"$M/etc/preduce/preduced.conf"
deb=/root/debs/$(basename "${DEBS[0]}")
# stdin closed: a conffile prompt would fail the reinstall, not wait.
if ! out=$(ctenv dpkg -i "$deb" 2>&1 </dev/null); then
    fail "reinstall" "$out"
fi
pid1=$(ct systemctl show -p MainPID --value preduced)
if tail -n 1 "$M/etc/preduce/preduced.conf" | grep -q "changed by the"; then
    pass "a changed conffile is kept over a reinstall"
else
    fail "conffile kept" "$(tail -n 3 "$M/etc/preduce/preduced.conf")"
fi
if [ "$pid1" != 0 ] && [ "$pid1" != "$pid0" ] &&
    ct systemctl is-active -q preduced; then
    pass "the running node is restarted by the upgrade ($pid0 -> $pid1)"
else
    fail "restart on upgrade" "MainPID $pid0 -> $pid1"
fi

files=$(ct dpkg -L preduce libpreduce1 libpreduce-dev python3-preduce |
    sort -u)
if out=$(ctenv dpkg -r python3-preduce libpreduce-dev preduce libpreduce1 \
    2>&1); then
    pass "dpkg -r of the 4 packages"
else
    fail "dpkg -r" "$out"
fi
active=$(ct systemctl is-active preduced preduced-scheduler | tr '\n' ' ')
if [ "$active" = "inactive inactive " ] && ! ct pgrep -x preduced >/dev/null
then
    pass "dpkg -r stopped both units"
else
    fail "stopped on remove" "$active; $(ct pgrep -a preduced)"
fi
if ct test -f /etc/preduce/preduced.conf &&
    ct dpkg-query -W -f='${db:Status-Status}\n' preduce |
    grep -qx config-files; then
    pass "dpkg -r keeps the conffile (status config-files)"
else
    fail "conffile after remove" "$(ct ls -la /etc/preduce)"
fi
if out=$(ctenv dpkg -P python3-preduce libpreduce-dev preduce libpreduce1 \
    2>&1); then
    pass "dpkg -P of the 4 packages"
else
    fail "dpkg -P" "$out"
fi
left=
while read -r f; do
    [ -z "$f" ] && continue
    # Directories other packages share (/usr, /etc, ...) stay.
    if [ -e "$M$f" ] && [ ! -d "$M$f" ]; then left="$left $f"; fi
done <<<"$files"
if [ -z "$left" ] && [ ! -e "$M/etc/preduce" ] &&
    [ ! -e "$M/usr/lib/python3/dist-packages/preduce" ]; then
    pass "dpkg -P leaves no file of the packages, nor /etc/preduce"
else
    fail "after purge" "left:$left $(ls -d "$M/etc/preduce" 2>/dev/null)"
fi
if ct getent passwd preduce >/dev/null; then
    pass "user preduce kept after the purge (Debian leaves system users)"
else
    fail "user after purge" "gone"
fi
finish
