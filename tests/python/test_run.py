# SPDX-License-Identifier: MIT
"""preduce-run against real daemons: standalone and against a running
node, the environment it gives, a failing trainer's status and Ctrl-C."""

import os
import signal
import subprocess
import sys
import time

import pytest

from cluster import PREDUCED, TOP, wait_for

PKG = os.path.join(TOP, "client", "python")

# A trainer: checks its environment, averages its rank with everyone's
# (allreduce) or with its group (dynamic), prints what it got.
TRAINER = r'''
import os, sys
import preduce
rank = int(os.environ["PREDUCE_RANK"])
world = int(os.environ["PREDUCE_WORLD_SIZE"])
assert int(os.environ["PREDUCE_LOCAL_RANK"]) == rank % int(
    os.environ["PREDUCE_LOCAL_WORLD_SIZE"])
with preduce.Client() as c:
    assert c.name == f"rank{rank}", c.name
    w = c.tensor(4)
    w[:] = rank
    r = c.reduce([w], timeout_ms=20000)
    # one write(2) a line: the trainers share the pipe
    os.write(1, f"rank {rank} of {world}: {w[0]:.3f} over "
                f"{len(r.members)} args {sys.argv[1:]}\n".encode())
'''


def launcher(*args, **kw):
    """A preduce-run from the tree (python3 -m preduce.run)."""
    env = dict(os.environ, PYTHONPATH=PKG, PREDUCED=PREDUCED)
    env.pop("PREDUCE_SOCKET", None)
    return subprocess.Popen([sys.executable, "-m", "preduce.run", *args],
                            env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def script(tmp_path, text, name="train.py"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_standalone_four_trainers_average(tmp_path):
    """No service at the socket: a private scheduler (allreduce here) and
    node; every trainer gets the average of ranks 0..3 and its args."""
    p = launcher("--socket", str(tmp_path / "none.sock"),
                 "--nproc-per-node", "4", "--policy", "allreduce",
                 script(tmp_path, TRAINER), "--lr", "0.1")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "a private scheduler" in err
    lines = sorted(out.splitlines())
    assert lines == [f"rank {r} of 4: 1.500 over 4 args ['--lr', '0.1']"
                     for r in range(4)], out
    # the private daemons are gone with their temporary directory
    logs = err.split("logs in ")[1].split()[0].rstrip(";")
    assert not os.path.exists(logs)


def test_uses_a_running_node(tmp_path, cluster):
    """A node daemon answering at --socket is used; no daemon started.
    Two runs at once on it are two jobs: each of 2 trainers (ranks 0 and
    1, the same names) averages with its own run alone."""
    c = cluster(1, sched_sets=("scheduler.policy=allreduce",
                               "scheduler.min_workers=2"))
    runs = [launcher("--socket", c.sock[0], "--nproc-per-node", "2",
                     script(tmp_path, TRAINER)) for _ in range(2)]
    for p in runs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert f"using the node daemon at {c.sock[0]}, job run-" in err
        assert "private" not in err
        assert sorted(out.splitlines()) == [
            f"rank {r} of 2: 0.500 over 2 args []" for r in range(2)]
    assert c.log("sched").count("' started (id ") == 2


def test_job_key_on_a_running_node(tmp_path, cluster):
    """--job-key hands the trainers PREDUCE_JOB_KEY: the job starts with
    the key and its trainers, who all have it, average; a key file that
    is not there stops preduce-run before any trainer starts."""
    c = cluster(1, sched_sets=("scheduler.policy=allreduce",
                               "scheduler.min_workers=2"))
    key = tmp_path / "job.key"
    key.write_bytes(b"0123456789abcdef0123456789abcdef")
    key.chmod(0o600)
    p = launcher("--socket", c.sock[0], "--nproc-per-node", "2", "--job",
                 "keyed", "--job-key", str(key), script(tmp_path, TRAINER))
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert sorted(out.splitlines()) == [
        f"rank {r} of 2: 0.500 over 2 args []" for r in range(2)]
    assert "job 'keyed' has a key" in c.log("sched")
    p = launcher("--socket", c.sock[0], "--job-key", str(tmp_path / "none"),
                 script(tmp_path, TRAINER))
    out, err = p.communicate(timeout=60)
    assert p.returncode != 0 and "--job-key" in err and "not a file" in err
    assert out == ""


def test_scheduler_on_a_running_node(tmp_path, cluster):
    """On the service, --scheduler hands the trainers PREDUCE_SCHEDULER:
    the job runs on that scheduler, not on the node's, and its trainers
    average there."""
    c = cluster(1, sched_sets=("scheduler.policy=allreduce",
                               "scheduler.min_workers=2"))
    own = cluster(0, sched_sets=("scheduler.policy=allreduce",
                                 "scheduler.min_workers=2"), name="own")
    p = launcher("--socket", c.sock[0], "--nproc-per-node", "2", "--job",
                 "own", "--scheduler", f"127.0.0.1:{own.sched_port}",
                 script(tmp_path, TRAINER))
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert sorted(out.splitlines()) == [
        f"rank {r} of 2: 0.500 over 2 args []" for r in range(2)]
    assert "job 'own' started" in own.log("sched")
    assert "job 'own'" not in c.log("sched")


def test_a_failing_trainer_stops_the_others(tmp_path):
    """Rank 1 exits 3: the others (asleep) are stopped, the status is
    passed on and the daemons' logs are kept."""
    body = ("import os, sys, time\n"
            "if os.environ['PREDUCE_RANK'] == '1':\n"
            "    sys.exit(3)\n"
            "time.sleep(60)\n")
    t0 = time.monotonic()
    p = launcher("--socket", str(tmp_path / "none.sock"),
                 "--nproc-per-node", "3", script(tmp_path, body))
    out, err = p.communicate(timeout=60)
    assert p.returncode == 3, err
    assert time.monotonic() - t0 < 30
    assert "rank 1 exited with status 3; stopping the others" in err
    kept = err.split("logs are kept in ")[1].split()[0]
    assert os.path.exists(os.path.join(kept, "node.log"))


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ")[1][0] != "Z"


def test_sigint_stops_everything(tmp_path):
    """Ctrl-C (SIGINT to the launcher): trainers and daemons stop, exit
    status 130."""
    pids = tmp_path / "pids"
    pids.mkdir()
    body = ("import os, time\n"
            f"open(os.path.join({str(pids)!r}, str(os.getpid())), 'w')\n"
            "time.sleep(60)\n")
    p = launcher("--socket", str(tmp_path / "none.sock"),
                 "--nproc-per-node", "2", script(tmp_path, body))
    wait_for(lambda: len(os.listdir(pids)) == 2, what="trainers")
    children = subprocess.run(["pgrep", "-P", str(p.pid)],
                              capture_output=True, text=True).stdout.split()
    assert len(children) == 4  # two trainers, a node and a scheduler
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert "SIGINT: stopping" in err
    for pid in children:
        assert not _alive(int(pid)), f"{pid} still runs"


def test_bad_arguments_are_refused(tmp_path):
    """Argument errors exit 2 with a message, starting nothing."""
    for args, text in ((["--nproc-per-node", "0", "x.py"], "at least 1"),
                       (["--nnodes", "2", "--node-rank", "2", "x.py"],
                        "--node-rank"),
                       (["--scheduler", "nohost", "x.py"], "HOST:PORT"),
                       (["--set", "novalue", "x.py"], "KEY=VALUE")):
        p = launcher(*args)
        _, err = p.communicate(timeout=30)
        assert p.returncode == 2 and text in err, (args, err)


def test_several_nodes_need_a_scheduler(tmp_path):
    p = launcher("--socket", str(tmp_path / "none.sock"), "--nnodes", "2",
                 "--node-rank", "1", script(tmp_path, "pass\n"))
    _, err = p.communicate(timeout=30)
    assert p.returncode != 0 and "give --scheduler HOST:PORT" in err


def test_a_daemon_that_cannot_start_is_reported(tmp_path):
    """A bad --set: the private daemon exits; its log's tail is shown."""
    p = launcher("--socket", str(tmp_path / "none.sock"), "--set",
                 "scheduler.policy=nonsense", script(tmp_path, "pass\n"))
    _, err = p.communicate(timeout=30)
    assert p.returncode == 1
    assert "the private scheduler did not start" in err
    assert "nonsense" in err


@pytest.mark.parametrize("nodes", [2])
def test_two_machines_in_one_run(tmp_path, nodes):
    """--nnodes 2: node rank 0 starts the scheduler at --scheduler, both
    start a node daemon; ranks 0..3 average together (allreduce)."""
    from cluster import free_port
    sched = f"127.0.0.1:{free_port()}"
    train = script(tmp_path, TRAINER)
    runs = [launcher("--socket", str(tmp_path / f"none{r}.sock"),
                     "--nnodes", "2", "--node-rank", str(r), "--scheduler",
                     sched, "--nproc-per-node", "2", "--policy",
                     "allreduce", train) for r in range(nodes)]
    outs = [p.communicate(timeout=60) for p in runs]
    for p, (out, err) in zip(runs, outs):
        assert p.returncode == 0, err
    lines = sorted(line for out, _ in outs for line in out.splitlines())
    assert lines == [f"rank {r} of 4: 1.500 over 4 args []"
                     for r in range(4)]


@pytest.mark.parametrize("args,policy", [((), "dynamic"),
                                         (("--policy", "constant"),
                                          "constant")])
def test_the_private_scheduler_takes_the_policy(tmp_path, args, policy):
    """--policy (default dynamic) is the private scheduler's, and
    --log-dir keeps the daemons' logs."""
    logs = tmp_path / "logs"
    p = launcher("--socket", str(tmp_path / "none.sock"), "--log-dir",
                 str(logs), *args, script(tmp_path, "pass\n"))
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    sched = (logs / "scheduler.log").read_text()
    assert f"policy {policy}" in sched, sched
    assert (logs / "node.log").exists()
