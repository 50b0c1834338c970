#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# client/examples/slurm/preduce.sbatch on a Slurm made on this machine
# (root only): Debian's slurmctld, slurmd and munge (installed when
# missing), a private munged and slurm.conf under a scratch directory, and
# two Slurm nodes, n1 and n2, each its own slurmd on 127.0.0.1 (Slurm's
# way of testing several nodes on one host). With no service answering,
# the job (2 nodes, 2 tasks each) must bring its own daemons and train: 4
# trainers finish their steps, the scheduler forms groups, both node
# daemons join through the job's cluster key; and after it ends no
# process of it may be left. Then with a service running (a scheduler and
# a node daemon of the test's, the host's preduced), a second job must
# train on it as job slurm-JOBID, starting no daemon of its own, and
# leave the service running; asked for the service when none answers, a
# job fails, saying so. Bounded: every wait has a deadline, each
# job a 3-minute limit, the whole about a minute here.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/ops/lib.sh
. client/examples/cluster.sh

BUILD=$(cd "${BUILD:-build}" && pwd)

if [ "$(id -u)" -ne 0 ]; then
    skip slurm "needs root (slurmd runs jobs as their user); run as root"
    finish
    exit
fi
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null ||
    ! command -v munged >/dev/null || ! command -v sbatch >/dev/null; then
    echo "installing slurmctld slurmd slurm-client munge"
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q \
        --no-install-recommends slurmctld slurmd slurm-client munge \
        >/dev/null 2>&1 || { fail setup "apt-get install failed"; finish; exit; }
fi

T=$(mktemp -d /tmp/preduce-slurm.XXXXXX)
PIDS=()
cleanup() {
    local p
    cluster_stop
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT
chmod 0755 "$T"
mkdir -m 0755 "$T/munge"
mkdir -m 0700 "$T/state" "$T/spool"
mkdir -m 0755 "$T/submit"

# munge: a key of our own, a socket of our own (not the system's munged).
head -c 1024 /dev/urandom >"$T/munge/munge.key"
chmod 0600 "$T/munge/munge.key"
munged --force --foreground --socket="$T/munge/munge.sock" \
    --key-file="$T/munge/munge.key" --pid-file="$T/munge/munged.pid" \
    --log-file="$T/munge/munged.log" --seed-file="$T/munge/munge.seed" \
    >"$T/munged.out" 2>&1 &
PIDS+=($!)

host=$(hostname -s)
cport=$(cluster_free_port)
p1=$(cluster_free_port)
p2=$(cluster_free_port)
export SLURM_CONF=$T/slurm.conf
cat >"$SLURM_CONF" <<CONF
ClusterName=preduce-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$cport
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$T/munge/munge.sock
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool/%n
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd-%n.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$p1 CPUs=2 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$p2 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=n1,n2 Default=YES MaxTime=5 State=UP
CONF

wait_for() { # seconds, then a command that must succeed within them
    local end=$((SECONDS + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -ge $end ] && return 1
        sleep 0.2
    done
}

wait_for 10 test -S "$T/munge/munge.sock" ||
    { fail munged "$(cat "$T/munge/munged.log")"; finish; exit; }
slurmctld -D -f "$SLURM_CONF" >"$T/slurmctld.out" 2>&1 &
PIDS+=($!)
wait_for 20 scontrol ping ||
    { fail slurmctld "$(tail -n 20 "$T/slurmctld.log" "$T/slurmctld.out")"; finish; exit; }
for n in n1 n2; do
    slurmd -D -N $n -f "$SLURM_CONF" >"$T/slurmd-$n.out" 2>&1 &
    PIDS+=($!)
done
idle() { [ "$(sinfo -h -N -o '%N %t' | grep -c ' idle$')" -eq 2 ]; }
if wait_for 30 idle; then
    pass "local Slurm: slurmctld, munged and 2 slurmd (n1, n2) up"
else
    fail "local Slurm up" "$(sinfo -N 2>&1; tail -n 20 "$T"/slurmd-n*.log)"
    finish
    exit
fi

# The job, as a user would submit it: submit NAME SERVICE_SOCKET [VAR=value
# ...] runs it to its end (sbatch --wait returns its exit code), its
# output in $T/NAME.out, sbatch's errors in $T/NAME.err, its id in
# $T/NAME.id. The sockets are under $T too, so that every process of the
# job names $T.
cp client/examples/slurm/preduce.sbatch "$T/submit/"
submit() {
    local name=$1 svc=$2
    shift 2
    (cd "$T/submit" && env PREDUCE_BIN="$BUILD" PREDUCE_STEPS=60 \
        PREDUCE_RUNDIR="$T/run" PREDUCE_SERVICE_SOCKET="$svc" "$@" \
        timeout 180 sbatch --wait --time=3 --nodes=2 --ntasks-per-node=2 \
        --output="$T/$name.out" --parsable preduce.sbatch >"$T/$name.id" \
        2>"$T/$name.err")
}

# No service answers at the socket given: the job's own daemons.
submit job "$T/none.sock"
rc=$?
job=$(cat "$T/job.id")
jobdir=$T/submit/preduce-$job
if [ $rc -eq 0 ] && grep -q "starting the job's own daemons" "$T/job.out"; then
    pass "job $job, no service answering, ran its own daemons to its end (exit 0)"
else
    fail "job ${job:-?} exit 0" "exit $rc: $(cat "$T/job.err" "$T/job.out")"
fi
done=$(grep -c "done steps=60 " "$T/job.out")
if [ "$done" -eq 4 ]; then
    pass "4 trainers trained 60 steps each: $(grep -o 'name=w[0-9] .*done.*' "$T/job.out" | head -1)"
else
    fail "4 trainers finished" "$done: $(cat "$T/job.out")"
fi
joined=$(cat "$jobdir"/node-n*.log 2>/dev/null | grep -c "joined job 'slurm-$job'")
if [ "$joined" -eq 2 ] && grep -q "trainer 'w3' is worker" "$jobdir"/node-n*.log; then
    pass "both node daemons joined the job's scheduler with its key"
else
    fail "both node daemons joined" "$(cat "$jobdir"/*.log)"
fi
if [ ! -e "$jobdir/cluster.key" ] && [ ! -e "$T/run" ]; then
    pass "the key and the sockets' directory are removed"
else
    fail "cleanup of key and sockets" "$(ls -la "$jobdir" "$T/run" 2>&1)"
fi
# Nothing of the job may outlive it: every process of it names $T/submit
# (the daemons, their key) or $T/run (the trainers, their socket). The
# first letter in brackets keeps the pattern from matching the shell that
# runs pgrep.
t=$(basename "$T")
mine="[${t:0:1}]${t:1}/(submit|run)/"
if wait_for 10 bash -c "! pgrep -f -- '$mine'"; then
    pass "no process of the job is left"
else
    fail "no process left" "$(pgrep -a -f -- "$mine")"
fi

# PREDUCE_SERVICE=yes with no service answering: the job fails at once,
# saying so, and starts nothing.
submit job1b "$T/none.sock" PREDUCE_SERVICE=yes
rc=$?
job1b=$(cat "$T/job1b.id")
if [ $rc -ne 0 ] && grep -q "PREDUCE_SERVICE=yes, but the service does not answer" \
    "$T/job1b.out" && [ ! -e "$T/submit/preduce-$job1b" ]; then
    pass "PREDUCE_SERVICE=yes and no service: job $job1b failed, saying why"
else
    fail "PREDUCE_SERVICE=yes without a service" \
        "exit $rc: $(cat "$T/job1b.err" "$T/job1b.out")"
fi

# The host's service: one scheduler and one node daemon that both Slurm
# nodes' trainers reach (n1 and n2 share this host), policy allreduce by
# default; the job asks for its own.
if ! PREDUCED=$BUILD/preduced cluster_start "$T/service" allreduce 1; then
    fail "service up" "$(cat "$T"/service/*.log)"
    finish
    exit
fi
svc=$(cluster_socket "$T/service" 0)
submit job2 "$svc"
rc=$?
job2=$(cat "$T/job2.id")
done=$(grep -c "done steps=60 " "$T/job2.out")
if [ $rc -eq 0 ] && [ "$done" -eq 4 ] &&
    grep -q "on the preduced service ($svc) as job slurm-$job2" "$T/job2.out"; then
    pass "job $job2 trained on the service: 4 trainers, 60 steps each"
else
    fail "job ${job2:-?} on the service" \
        "exit $rc, $done done: $(cat "$T/job2.err" "$T/job2.out")"
fi
workers=$(grep -c "is worker [0-9]* of job 'slurm-$job2'" "$T/service/node0.log")
if [ "$workers" -eq 4 ] &&
    grep -q "job 'slurm-$job2' started (id [0-9]*), policy dynamic" \
        "$T/service/sched.log" &&
    wait_for 10 grep -q "job 'slurm-$job2' ended" "$T/service/sched.log"; then
    pass "the service ran it as job slurm-$job2 (policy dynamic), then ended it"
else
    fail "job slurm-$job2 on the service" \
        "$workers workers: $(cat "$T"/service/*.log)"
fi
alive=0
for p in "${CLUSTER_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
if [ ! -e "$T/submit/preduce-$job2" ] && [ "$alive" -eq 2 ]; then
    pass "no daemon of the job's own; the service still runs"
else
    fail "service job left the service alone" \
        "$alive of 2 alive; $(ls -la "$T/submit" 2>&1)"
fi
finish
