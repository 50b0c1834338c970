# SPDX-License-Identifier: MIT
"""preduce-run: starts a training's workers, as torchrun does.

    preduce-run --nproc-per-node 4 train.py --epochs 3

starts four copies of ``python3 train.py --epochs 3``. Each gets
PREDUCE_SOCKET, PREDUCE_RANK, PREDUCE_LOCAL_RANK, PREDUCE_WORLD_SIZE and
PREDUCE_LOCAL_WORLD_SIZE in its environment, from which ``preduce.Client()``
and ``preduce.torch.PartialReduce(model, optimizer)`` take their defaults,
and, on a machine's service, PREDUCE_JOB (--job, else $PREDUCE_JOB, else
run-HOST-PID: a run of its own, never averaged with another's),
PREDUCE_POLICY (--policy, when given) and PREDUCE_JOB_KEY (--job-key,
when given: the job admits only workers with that key).

Where the workers' node daemon comes from:
- the node daemon at --socket (else $PREDUCE_SOCKET, else the service's
  /run/preduce/preduced.sock) when it answers: the machine's service;
- otherwise, on one machine (or with --standalone), a private scheduler
  and node daemon for this run, stopped after it (torchrun --standalone);
- on several machines (--nnodes K --node-rank R --scheduler HOST:PORT)
  without a service: every machine starts a private node daemon that
  follows the scheduler at HOST:PORT, which node rank 0 starts. On a
  machine's service --scheduler names the job's own scheduler, started
  beforehand (PREDUCE_SCHEDULER: the service follows it for this job).

The trainers' output is theirs (inherited). When one exits with a failure
the others are stopped and preduce-run exits with its status; Ctrl-C (or
SIGTERM) stops everything it started. Its own messages start with
"preduce-run:".
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SERVICE_SOCKET = "/run/preduce/preduced.sock"
STOP_GRACE_S = 10.0  # a trainer's time to exit after SIGTERM
DAEMON_START_S = 10.0


def parse_args(argv):
    """The command line; argv as sys.argv[1:]."""
    p = argparse.ArgumentParser(
        prog="preduce-run",
        description="Start N training processes that average through "
        "preduce; the script's own arguments follow it.")
    p.add_argument("--nproc-per-node", "--nproc_per_node", type=int,
                   default=1, metavar="N", help="trainers on this machine")
    p.add_argument("--nnodes", type=int, default=1, metavar="K",
                   help="machines in the run (each runs preduce-run)")
    p.add_argument("--node-rank", "--node_rank", type=int, default=0,
                   metavar="R", help="this machine's index, 0..K-1")
    p.add_argument("--scheduler", metavar="HOST:PORT",
                   help="the run's scheduler when no service runs: node "
                   "rank 0 starts it there, the others follow it; on the "
                   "service, the job's own scheduler, running already "
                   "(PREDUCE_SCHEDULER)")
    p.add_argument("--socket", metavar="PATH",
                   help="the node daemon to use (default $PREDUCE_SOCKET, "
                   "else " + SERVICE_SOCKET + ")")
    p.add_argument("--standalone", action="store_true",
                   help="always start a private scheduler and node daemon")
    p.add_argument("--policy", default=None,
                   choices=("dynamic", "constant", "allreduce"),
                   help="the policy: a private scheduler's (default "
                   "dynamic), or the job's on the service")
    p.add_argument("--job", metavar="NAME",
                   help="the job on the service (default $PREDUCE_JOB, "
                   "else run-HOST-PID; with --nnodes > 1 give the same "
                   "on every machine)")
    p.add_argument("--job-key", metavar="FILE",
                   help="the job's key file (default $PREDUCE_JOB_KEY): "
                   "only workers with the same key join the job "
                   "(mode 600; preduced --gen-key FILE writes one)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VAL",
                   help="a setting for the private daemons (preduced.conf "
                   "keys; scheduler.* go to the scheduler)")
    p.add_argument("--preduced", metavar="PATH",
                   help="the preduced binary for private daemons (default "
                   "$PREDUCED, then PATH, /usr/sbin, /usr/bin)")
    p.add_argument("--log-dir", metavar="DIR",
                   help="keep the private daemons' logs here")
    p.add_argument("-m", "--module", action="store_true",
                   help="the script is a module name (python3 -m)")
    p.add_argument("--no-python", action="store_true",
                   help="run the script as a program, not with python3")
    p.add_argument("script", help="the training script")
    p.add_argument("args", nargs=argparse.REMAINDER,
                   help="the script's arguments")
    a = p.parse_args(argv)
    if a.nproc_per_node < 1:
        p.error("--nproc-per-node must be at least 1")
    if a.nnodes < 1 or not 0 <= a.node_rank < a.nnodes:
        p.error("--node-rank must be in 0..--nnodes-1")
    if a.scheduler is not None:
        try:
            split_host_port(a.scheduler)
        except ValueError as e:
            p.error(f"--scheduler: {e}")
    for kv in a.set:
        if "=" not in kv or kv.startswith("="):
            p.error(f"--set {kv}: expected KEY=VALUE")
    return a


def split_host_port(text):
    """("host", port) from "host:port"; ValueError when it is not one."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or \
            not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def answers(path):
    """True when a daemon accepts connections at the Unix socket path."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port(host="127.0.0.1"):
    """A TCP port nothing listens on now (the daemon binds it soon)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def local_address(host, port):
    """This machine's address on the route to host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, port))  # UDP: no packet is sent
        return s.getsockname()[0]


def find_preduced(given):
    """The preduced binary to start private daemons with."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [given, os.environ.get("PREDUCED"), shutil.which("preduced"),
                  "/usr/sbin/preduced", "/usr/bin/preduced",
                  # a source tree: client/python/preduce -> build/
                  os.path.join(here, "..", "..", "..", "build", "preduced")]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    raise SystemExit("preduce-run: no node daemon answers and preduced was "
                     "not found to start one: install preduce, or give "
                     "--preduced PATH (or $PREDUCED)")


class Daemons:
    """The private scheduler and node daemon of one run, if any."""

    def __init__(self, preduced, log_dir, settings, policy):
        self.preduced, self.log_dir = preduced, log_dir
        self.settings, self.policy, self.procs = settings, policy, []
        # An empty config file: without -c a daemon reads the service's
        # /etc/preduce/preduced.conf (its ports, its key), not ours.
        self.conf = os.path.join(log_dir, "empty.conf")
        with open(self.conf, "w"):
            pass

    def _for(self, role):
        """The --set settings for a role: scheduler.* to the scheduler,
        node.* to the node daemon, the rest (security, log, ...) to
        both."""
        other = "node." if role == "scheduler" else "scheduler."
        return [kv for kv in self.settings if not kv.startswith(other)]

    def _start(self, role, what, sets):
        log = os.path.join(self.log_dir, f"{what}.log")
        cmd = [self.preduced, "-c", self.conf, "--role", role]
        for kv in sets:
            cmd += ["--set", kv]
        with open(log, "ab") as out:
            # A session of their own: Ctrl-C at the terminal reaches the
            # trainers, and the daemons stop after them, in order.
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL,
                                 start_new_session=True)
        self.procs.append((what, p, log))
        return p

    def _wait(self, what, p, log, ready):
        deadline = time.monotonic() + DAEMON_START_S
        while time.monotonic() < deadline:
            if ready():
                return
            if p.poll() is not None:
                break
            time.sleep(0.05)
        with open(log, errors="replace") as f:
            tail = "".join(f.readlines()[-10:])
        raise SystemExit(f"preduce-run: the private {what} did not start "
                         f"(log {log}):\n{tail}")

    def scheduler(self, listen, world):
        """Starts a scheduler listening on listen ("host:port")."""
        host, port = split_host_port(listen)
        sets = [f"scheduler.listen={listen}",
                f"scheduler.min_workers={world}",
                f"scheduler.policy={self.policy}"] + self._for("scheduler")
        p = self._start("scheduler", "scheduler", sets)
        probe = "127.0.0.1" if host in ("0.0.0.0", "::") else host

        def up():
            try:
                socket.create_connection((probe, port), 0.5).close()
                return True
            except OSError:
                return False
        self._wait("scheduler", p, self.procs[-1][2], up)

    def node(self, name, scheduler, sock, data_host):
        """Starts a node daemon with its trainers' socket at sock."""
        sets = [f"node.name={name}", f"node.scheduler={scheduler}",
                f"node.socket={sock}",
                f"node.data_listen={data_host}:{free_port(data_host)}"]
        sets += self._for("node")
        p = self._start("node", "node", sets)
        self._wait("node daemon", p, self.procs[-1][2],
                   lambda: answers(sock))

    def stop(self):
        """Stops them, the node daemon first."""
        for _, p, _ in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for _, p, _ in reversed(self.procs):
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []


def trainer_command(a):
    """The command each trainer runs."""
    if a.no_python:
        return [a.script] + a.args
    if a.module:
        return [sys.executable, "-m", a.script] + a.args
    return [sys.executable, a.script] + a.args


def supervise(trainers):
    """Waits for the trainers; the first failure stops the others. The
    exit status to pass on."""
    status = 0
    while trainers:
        for rank, p in list(trainers.items()):
            rc = p.poll()
            if rc is None:
                continue
            del trainers[rank]
            if rc != 0 and status == 0:
                status = rc if rc > 0 else 128 - rc
                print(f"preduce-run: rank {rank} exited with status "
                      f"{status}; stopping the others", file=sys.stderr,
                      flush=True)
                stop_trainers(trainers)
        time.sleep(0.05)
    return status


def stop_trainers(trainers):
    """SIGTERM to each, then SIGKILL after STOP_GRACE_S."""
    for p in trainers.values():
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for p in trainers.values():
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class _Stop(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _raise_stop(signum, _frame):
    raise _Stop(signum)


def run(a):
    """Runs the trainers of one preduce-run; its exit status."""
    world = a.nnodes * a.nproc_per_node
    sock = a.socket or os.environ.get("PREDUCE_SOCKET") or SERVICE_SOCKET
    private = a.standalone or not answers(sock)
    if private and a.nnodes > 1 and a.scheduler is None:
        raise SystemExit("preduce-run: no node daemon answers at "
                         f"{sock}; with --nnodes > 1 give --scheduler "
                         "HOST:PORT (node rank 0 starts it there)")
    job = a.job or os.environ.get("PREDUCE_JOB")
    key = a.job_key or os.environ.get("PREDUCE_JOB_KEY")
    # A key needs a job of its own (libpreduce refuses one on the default).
    if (key or not private) and not job:
        if a.nnodes > 1:
            raise SystemExit("preduce-run: with --nnodes > 1 on the "
                             "service or with a job key, give --job NAME, "
                             "the same on every machine")
        job = f"run-{socket.gethostname()}-{os.getpid()}"
    extra = {}
    if job:
        extra["PREDUCE_JOB"] = job
    if a.policy and not private:
        extra["PREDUCE_POLICY"] = a.policy
    if a.scheduler and not private:
        extra["PREDUCE_SCHEDULER"] = a.scheduler
    if key:
        # The trainers may start elsewhere (cwd): hand them the full path.
        if not os.path.isfile(key):
            raise SystemExit(f"preduce-run: --job-key {key}: not a file "
                             "(or $PREDUCE_JOB_KEY)")
        extra["PREDUCE_JOB_KEY"] = os.path.abspath(key)
    tmp = tempfile.mkdtemp(prefix="preduce-run.") if private else None
    log_dir = a.log_dir or tmp
    daemons = None
    trainers = {}
    status = 1
    old = {s: signal.signal(s, _raise_stop)
           for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if private:
            os.makedirs(log_dir, exist_ok=True)
            daemons = Daemons(find_preduced(a.preduced), log_dir, a.set,
                              a.policy or "dynamic")
            if a.nnodes == 1:
                sched = f"127.0.0.1:{free_port()}"
                daemons.scheduler(sched, world)
                data_host = "127.0.0.1"
            else:
                sched = a.scheduler
                host, port = split_host_port(sched)
                if a.node_rank == 0:
                    daemons.scheduler(sched, world)
                data_host = local_address(host, port)
            sock = os.path.join(tmp, "node.sock")
            daemons.node(f"node{a.node_rank}", sched, sock, data_host)
            print(f"preduce-run: a private scheduler ({sched}) and node "
                  f"daemon for this run; logs in {log_dir}",
                  file=sys.stderr, flush=True)
        else:
            print(f"preduce-run: using the node daemon at {sock}, job "
                  f"{job}", file=sys.stderr, flush=True)
        cmd = trainer_command(a)
        for local in range(a.nproc_per_node):
            rank = a.node_rank * a.nproc_per_node + local
            env = dict(os.environ, PREDUCE_SOCKET=sock,
                       PREDUCE_RANK=str(rank), PREDUCE_LOCAL_RANK=str(local),
                       PREDUCE_WORLD_SIZE=str(world),
                       PREDUCE_LOCAL_WORLD_SIZE=str(a.nproc_per_node),
                       **extra)
            env.pop("PREDUCE_NAME", None)  # one name would be every rank's
            if private:  # the private scheduler, not one from outside
                env.pop("PREDUCE_SCHEDULER", None)
            trainers[rank] = subprocess.Popen(cmd, env=env)
        status = supervise(dict(trainers))
        return status
    except _Stop as e:
        print(f"preduce-run: {signal.Signals(e.signum).name}: stopping",
              file=sys.stderr, flush=True)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop_trainers(trainers)
        status = 128 + e.signum
        return status
    finally:
        # No signal may cut the cleanup short: the daemons are in their
        # own session and would outlive us.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if daemons is not None:
            daemons.stop()
        for s, h in old.items():
            signal.signal(s, h)
        if tmp is not None and a.log_dir is None:
            if status == 0:
                shutil.rmtree(tmp, ignore_errors=True)
            else:  # what the daemons said may explain the failure
                print(f"preduce-run: the private daemons' logs are kept in "
                      f"{tmp}", file=sys.stderr, flush=True)


def main(argv=None):
    """The preduce-run command."""
    sys.exit(run(parse_args(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    main()
