# SPDX-License-Identifier: MIT
"""Real preduced daemons for Python tests and benchmarks: a scheduler and
node daemons on 127.0.0.1, each with its own port and socket in a given
directory. The binary comes from $PREDUCED or build/preduced."""

import os
import socket
import subprocess
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PREDUCED = os.environ.get("PREDUCED", os.path.join(TOP, "build", "preduced"))


def free_port():
    """A port that was free a moment ago, below the ephemeral range."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    for _ in range(200):
        port = low - 1 - int.from_bytes(os.urandom(2), "little") % 8000
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port")


def wait_for(check, timeout_s=10.0, what="condition"):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.01)
    raise TimeoutError(f"timed out waiting for {what}")


class Cluster:
    """A scheduler and `nodes` node daemons; sock[i] is node i's socket.
    With sched_conf (a file's path) the scheduler reads that file too, so
    that a test can change it and reload (SIGHUP) the scheduler."""

    def __init__(self, tmp, nodes, sched_sets=(), node_sets=(),
                 sched_conf=None):
        self.dir, self.procs, self.sock = str(tmp), [], []
        self.sched_port = free_port()
        conf = ["-c", sched_conf] if sched_conf else []
        self._start("sched", [*conf, "--role", "scheduler", "--set",
                              f"scheduler.listen=127.0.0.1:{self.sched_port}",
                              *self._sets(sched_sets)])
        wait_for(lambda: self._connects(self.sched_port), what="scheduler")
        for i in range(nodes):
            path = os.path.join(self.dir, f"node{i}.sock")
            self._start(f"node{i}", [
                "--role", "node", "--set", f"node.name=node{i}",
                "--set", f"node.socket={path}",
                "--set", f"node.scheduler=127.0.0.1:{self.sched_port}",
                "--set", f"node.data_listen=127.0.0.1:{free_port()}",
                *self._sets(node_sets)])
            wait_for(lambda: os.path.exists(path), what=f"node{i}'s socket")
            self.sock.append(path)
        time.sleep(0.1)  # the nodes join and learn about each other

    @staticmethod
    def _sets(sets):
        return [a for s in sets for a in ("--set", s)]

    @staticmethod
    def _connects(port):
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    def _start(self, who, args):
        log = open(os.path.join(self.dir, f"{who}.log"), "w")
        self.procs.append((who, subprocess.Popen(
            [PREDUCED, *args], stdout=log, stderr=subprocess.STDOUT)))

    def log(self, who):
        with open(os.path.join(self.dir, f"{who}.log")) as f:
            return f.read()

    def stop(self):
        """SIGTERM every daemon; the names of those that did not exit 0."""
        bad = []
        for who, p in self.procs:
            p.terminate()
        for who, p in self.procs:
            try:
                if p.wait(timeout=5) != 0:
                    bad.append(who)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                bad.append(who)
        return bad
