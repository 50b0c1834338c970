# SPDX-License-Identifier: MIT
"""Real preduced daemons on hosts of their own: each node daemon in a
network namespace, the namespaces on one bridge with every host's link
capped at a rate each way, as tests/hosts/ makes them (tests/hosts/net.sh
up, cap, down; the bridge lives in a namespace of its own, so nothing of
the network is in the caller's). The scheduler runs beside node 0.

Trainers stay in the caller's namespace: a node's socket is a pathname
unix socket, which a process of any network namespace reaches through the
file system, and the shared memory behind it is the same /dev/shm.

Needs root (ip netns, tc). Namespaces are named prbt<pid>-*: stop()
deletes them with whatever still runs in them, and a new CappedCluster
first clears those of a process that is gone (a run killed with SIGKILL).
"""

import os
import re
import subprocess
import time

from cluster import PREDUCED, TOP, free_port, wait_for

NET_SH = os.path.join(TOP, "tests", "hosts", "net.sh")
# ip and tc do not wait on the network; this bounds a stuck one.
NET_TIMEOUT_S = 20


def net(*args):
    """Runs tests/hosts/net.sh with args; raises CalledProcessError with
    its output when it fails."""
    subprocess.run([NET_SH, *map(str, args)], check=True,
                   capture_output=True, text=True, timeout=NET_TIMEOUT_S)


def unavailable():
    """Why namespaces cannot be made here (a sentence), or None."""
    if os.geteuid() != 0:
        return "network namespaces and tc need root"
    for tool in ("ip", "tc"):
        if not any(os.access(os.path.join(d, tool), os.X_OK)
                   for d in os.environ.get("PATH", "").split(os.pathsep)
                   + ["/usr/sbin", "/sbin"]):
            return f"{tool} (iproute2) is not installed"
    return None


def clear_leftovers():
    """Deletes the namespaces prbt<pid>-* of processes that are gone."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True,
                         text=True, timeout=NET_TIMEOUT_S).stdout
    for pid in {m.group(1) for m in re.finditer(r"^prbt(\d+)-", out, re.M)}:
        if not os.path.exists(f"/proc/{pid}"):
            net("down", f"prbt{pid}")


class CappedCluster:
    """A scheduler and `nodes` node daemons, node i alone on host i
    (namespace PREFIX-h<i>, address 10.77.0.<i+1>), every host's link
    capped at rate_mbit Mbit/s each way (tbf, net.sh's 64 kB burst and
    200 ms of queue; queue "prio": packets marked low-delay, as the
    daemons mark their scheduler and express connections', go before
    the others, as pfifo_fast sends them); sock[i] is node i's
    socket. The interface of cluster.Cluster: sock, log(who),
    stop()."""

    def __init__(self, tmp, nodes, sched_sets=(), node_sets=(),
                 rate_mbit=100, queue="fifo"):
        self.dir, self.procs, self.sock = str(tmp), [], []
        self.prefix = f"prbt{os.getpid()}"
        self.rate_mbit = rate_mbit
        self.queue = queue
        self._net_up = False
        try:
            self._start(nodes, sched_sets, node_sets)
        except BaseException:
            self.stop()
            raise

    def host(self, i):
        """Host i's namespace and address."""
        return f"{self.prefix}-h{i}", f"10.77.0.{i + 1}"

    def _start(self, nodes, sched_sets, node_sets):
        clear_leftovers()
        net("down", self.prefix)  # an earlier run of this process
        self._net_up = True
        net("up", self.prefix, nodes)
        for i in range(nodes):
            net("cap", self.prefix, i, f"{round(self.rate_mbit * 1000)}kbit",
                "64kb", self.queue)
        ns0, addr0 = self.host(0)
        sched = f"{addr0}:{free_port()}"
        self._spawn("sched", ns0, ["--role", "scheduler", "--set",
                                   f"scheduler.listen={sched}",
                                   *self._sets(sched_sets)])
        self._wait_log("sched", "scheduler listening on")
        for i in range(nodes):
            ns, addr = self.host(i)
            path = os.path.join(self.dir, f"node{i}.sock")
            self._spawn(f"node{i}", ns, [
                "--role", "node", "--set", f"node.name=node{i}",
                "--set", f"node.socket={path}",
                "--set", f"node.scheduler={sched}",
                "--set", f"node.data_listen={addr}:{free_port()}",
                *self._sets(node_sets)])
            # Each has joined before the next starts: ids in host order.
            self._wait_log(f"node{i}", "joined job")
            wait_for(lambda: os.path.exists(path), what=f"node{i}'s socket")
            self.sock.append(path)
        time.sleep(0.1)  # the nodes learn about each other

    @staticmethod
    def _sets(sets):
        return [a for s in sets for a in ("--set", s)]

    def _spawn(self, who, ns, args):
        # ip netns exec execs preduced: the pid is the daemon's.
        with open(os.path.join(self.dir, f"{who}.log"), "w") as log:
            self.procs.append((who, subprocess.Popen(
                ["ip", "netns", "exec", ns, PREDUCED, *args], stdout=log,
                stderr=subprocess.STDOUT)))

    def _wait_log(self, who, words, timeout_s=10.0):
        p = self.procs[-1][1]

        def ready():
            if p.poll() is not None:
                raise RuntimeError(f"{who} exited {p.returncode}:\n"
                                   + self.log(who)[-2000:])
            return words in self.log(who)
        wait_for(ready, timeout_s, f"{who}: '{words}'")

    def log(self, who):
        with open(os.path.join(self.dir, f"{who}.log")) as f:
            return f.read()

    def stop(self):
        """SIGTERM every daemon, then delete the namespaces (and whatever
        still runs in them); the names of the daemons that did not exit
        0. Safe to call twice."""
        bad = []
        for who, p in self.procs:
            if p.poll() is None:
                p.terminate()
        for who, p in self.procs:
            try:
                if p.wait(timeout=5) != 0:
                    bad.append(who)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                bad.append(who)
        self.procs = []
        if self._net_up:
            net("down", self.prefix)
            self._net_up = False
        return bad
