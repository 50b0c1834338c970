# SPDX-License-Identifier: MIT
"""Jobs on one scheduler and the same node daemons: two jobs of one model
size never average each other's values, a job's first worker sets its
settings and a later one that asks for others is refused with the reason,
and a job named by the environment is the one joined."""

import errno
import os
import subprocess
import threading

import pytest

import preduce
from cluster import TOP, free_port

N = 1000
STEPS = 40


def _run_job(sock, job, values, results, errors, scheduler=None):
    """One worker per node socket of `job` (on `scheduler`, None: the
    node's); each puts values[rank] in its tensor, reduces, and records
    what it got and the group's ranks."""
    def worker(i, path):
        try:
            c = preduce.Client(path, f"w{i}", job=job, scheduler=scheduler)
            t = c.tensor(N)
            for _ in range(STEPS):
                t[:] = values[c.rank]
                r = c.reduce([t])
                results.append((job, c.rank, float(t[0]),
                                float(t.max() - t.min()),
                                [(m[0], m[2]) for m in r.members]))
            assert c.job == job
            c.close()
        except Exception as e:  # reported by the test, not lost in a thread
            errors.append(e)
    return [threading.Thread(target=worker, args=(i, p))
            for i, p in enumerate(sock)]


def _two_jobs(c, b_scheduler=None):
    """Jobs a and b, one worker each on both of c's nodes, the same model
    size, reducing at once (b on b_scheduler, None: the nodes'): their
    values and results, after checking that no worker failed."""
    values = {"a": [1.0, 3.0], "b": [1000.0, 3000.0]}
    results, errors = [], []
    threads = (_run_job(c.sock, "a", values["a"], results, errors) +
               _run_job(c.sock, "b", values["b"], results, errors,
                        b_scheduler))
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(results) == 4 * STEPS
    return values, results


def test_two_jobs_of_one_size_never_mix(cluster):
    """Jobs a and b, one worker each on both nodes, the same model size,
    reducing at once: every result is its own job's values weighted by
    the group's weights (uniform; a worker that just joined has weight 0
    and takes the others' model), never a value of the other job."""
    c = cluster(2, ("scheduler.policy=dynamic", "scheduler.window_ms=5",
                    "scheduler.weighting=uniform"))
    values, results = _two_jobs(c)
    pairs = 0
    for job, rank, got, spread, members in results:
        ranks = {m for m, _ in members}
        assert ranks <= {0, 1} and rank in ranks
        want = sum(w * values[job][m] for m, w in members)
        assert got == pytest.approx(want), (job, rank, got, members)
        assert spread == 0
        pairs += len(members) == 2 and 0 < members[0][1] < 1
    assert pairs > 0, "no group of two formed in either job"
    log = c.log("sched")
    assert "job 'a' started" in log and "job 'b' started" in log
    # The workers' leaves reach the scheduler after their close returns.
    wait_for_log(c, "job 'a' ended: its last worker left", 10)


def test_job_on_its_own_scheduler(cluster):
    """Job b names a scheduler of its own (scheduler=...), job a uses the
    nodes': both run at once on the same nodes with one model size, each
    result is its own job's values, and b's workers are b's scheduler's
    alone. A scheduler that is no host:port is refused before the
    connect."""
    c = cluster(2, ("scheduler.policy=dynamic", "scheduler.window_ms=5",
                    "scheduler.weighting=uniform"))
    b = cluster(0, ("scheduler.policy=dynamic", "scheduler.window_ms=5",
                    "scheduler.weighting=uniform"), name="b")
    values, results = _two_jobs(c, f"127.0.0.1:{b.sched_port}")
    for job, rank, got, spread, members in results:
        want = sum(w * values[job][m] for m, w in members)
        assert got == pytest.approx(want), (job, rank, got, members)
    assert "job 'b' started" in b.log("sched")
    assert "job 'b'" not in c.log("sched")
    assert "job 'a'" not in b.log("sched")
    with pytest.raises(ValueError):
        preduce.Client(c.sock[0], "w9", scheduler="no-port")


def test_job_settings_first_worker_decides(cluster):
    """A job started with policy=allreduce runs under it (the others'
    scheduler is dynamic); a worker asking for constant is refused with
    the reason; a setting the scheduler does not allow is refused too."""
    c = cluster(1, ("scheduler.policy=dynamic",))
    first = preduce.Client(c.sock[0], "w0", job="sweep-1",
                           settings={"policy": "allreduce"})
    with pytest.raises(preduce.PreduceError) as e:
        preduce.Client(c.sock[0], "w1", job="sweep-1",
                       settings=["policy=constant"])
    assert "runs with the settings of its first worker" in str(e.value)
    assert "policy=allreduce" in str(e.value)
    with pytest.raises(preduce.PreduceError) as e:
        preduce.Client(c.sock[0], "w2", job="sweep-2",
                       settings={"heartbeat_ms": 5})
    assert "not a key a job may set" in str(e.value)
    with pytest.raises(ValueError):
        preduce.Client(c.sock[0], "w3", job="two words")
    # The same name in another job is another worker.
    other = preduce.Client(c.sock[0], "w0", job="sweep-2")
    assert (first.job, other.job) == ("sweep-1", "sweep-2")
    assert "policy allreduce; its settings: policy=allreduce" in c.log(
        "sched")
    first.close()
    other.close()


def test_job_and_policy_from_the_environment(cluster, monkeypatch):
    """PREDUCE_JOB names the job and PREDUCE_POLICY sets its policy when
    no option does; without either, the daemon's job."""
    c = cluster(1, ("scheduler.policy=dynamic",))
    plain = preduce.Client(c.sock[0], "plain")
    assert plain.job == "default"
    monkeypatch.setenv("PREDUCE_JOB", "from-env")
    monkeypatch.setenv("PREDUCE_POLICY", "constant")
    env = preduce.Client(c.sock[0], "env")
    assert env.job == "from-env"
    assert "job 'from-env' started (id 2), policy constant" in c.log("sched")
    monkeypatch.setenv("PREDUCE_POLICY", "not a policy")
    with pytest.raises(preduce.PreduceError) as e:
        preduce.Client(c.sock[0], "env2")
    assert "'not a policy' is not one of" in str(e.value)
    plain.close()
    env.close()


def test_preducectl_lists_jobs(cluster):
    """preducectl jobs lists each job with its policy and workers;
    workers JOB shows that job's alone."""
    port = free_port()
    c = cluster(1, ("scheduler.policy=dynamic",
                    f"metrics.listen=127.0.0.1:{port}"))
    key = _key_file(c.dir, "alpha.key", b"alpha's key, 16 bytes or more")
    a = preduce.Client(c.sock[0], "w0", job="alpha",
                       settings={"policy": "allreduce"}, job_key=key)
    b = preduce.Client(c.sock[0], "w0", job="beta")
    ctl = os.path.join(TOP, "build", "preducectl")
    out = subprocess.run([ctl, "jobs", "--metrics", f"127.0.0.1:{port}"],
                         capture_output=True, text=True, check=True).stdout
    rows = [line.split() for line in out.splitlines()[2:]]
    assert [(r[0], r[2], r[3], r[4]) for r in rows] == [
        ("alpha", "allreduce", "yes", "1"), ("beta", "dynamic", "no", "1")]
    out = subprocess.run([ctl, "workers", "beta", "--metrics",
                          f"127.0.0.1:{port}"],
                         capture_output=True, text=True, check=True).stdout
    assert "beta" in out and "alpha" not in out
    a.close()
    b.close()


def _key_file(directory, name, data, mode=0o600):
    """A job key file of `data` in directory, with `mode`; its path."""
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    return path


def _metric(port, name):
    """The value of the unlabelled series `name` at a metrics listener."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                timeout=5) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in the metrics")


def test_job_key_admits_only_its_holders(cluster, monkeypatch):
    """Job "secret" is started with key k1: a worker with k2, or with no
    key, is refused with EACCES and a reason naming the case; one with
    k1 on the other node (given by PREDUCE_JOB_KEY) joins and the two
    average each other. A job started without a key refuses a worker
    that brings one. A key file that group or others may read, or one
    that is too short, is refused before the connect."""
    port = free_port()
    c = cluster(2, ("scheduler.policy=dynamic", "scheduler.window_ms=5",
                    "scheduler.weighting=uniform",
                    f"metrics.listen=127.0.0.1:{port}"))
    k1 = _key_file(c.dir, "k1", b"the first key: 0123456789abcdef")
    k2 = _key_file(c.dir, "k2", b"the other key: 0123456789abcdef")
    a0 = preduce.Client(c.sock[0], "a0", job="secret", job_key=k1)
    for key, says in ((k2, "has another key"),
                      (None, "has a key and this worker gave none")):
        with pytest.raises(preduce.PreduceError) as e:
            preduce.Client(c.sock[1], "x", job="secret", job_key=key)
        assert e.value.errno == errno.EACCES
        assert f"job 'secret' {says}" in str(e.value)
    monkeypatch.setenv("PREDUCE_JOB_KEY", k1)
    a1 = preduce.Client(c.sock[1], "a1", job="secret")
    monkeypatch.delenv("PREDUCE_JOB_KEY")
    open_job = preduce.Client(c.sock[0], "o0", job="open")
    with pytest.raises(preduce.PreduceError) as e:
        preduce.Client(c.sock[1], "o1", job="open", job_key=k1)
    assert e.value.errno == errno.EACCES
    assert "job 'open' has no key" in str(e.value)
    assert _metric(port, "preduce_sched_job_key_refused_total") == 3

    # The two holders of k1 average each other: a group of both forms,
    # and its result is their values under the group's weights.
    value = {a0.rank: 1.0, a1.rank: 3.0}
    both, wrong = [], []

    def reduce(cl):
        t = cl.tensor(64)
        for _ in range(100):
            t[:] = value[cl.rank]
            r = cl.reduce([t])
            want = sum(w * value[m] for m, _, w in r.members)
            if float(t[0]) != pytest.approx(want):
                wrong.append((cl.name, float(t[0]), r.members))
            if len(r.members) == 2:
                both.append(cl.name)
                return
    th = [threading.Thread(target=reduce, args=(cl,)) for cl in (a0, a1)]
    for t in th:
        t.start()
    for t in th:
        t.join(30)
    assert not wrong, wrong
    assert both, "no group of the two key holders formed"

    loose = _key_file(c.dir, "loose", b"0123456789abcdef", 0o640)
    with pytest.raises(preduce.PreduceError) as e:
        preduce.Client(c.sock[0], "l", job="secret", job_key=loose)
    assert e.value.errno == errno.EPERM and "chmod 600" in str(e.value)
    short = _key_file(c.dir, "short", b"15 bytes only..")
    with pytest.raises(preduce.PreduceError) as e:
        preduce.Client(c.sock[0], "s", job="secret", job_key=short)
    assert e.value.errno == errno.EINVAL and "16 to 4096" in str(e.value)
    for cl in (a0, a1, open_job):
        cl.close()


def test_job_key_survives_a_scheduler_restart(cluster):
    """The scheduler of a keyed job is killed and another started on its
    port: the nodes re-register the job's workers with their proofs, the
    job is keyed again, a worker without the key is refused, and the key
    holders reduce together again."""
    sets = ("scheduler.policy=dynamic", "scheduler.window_ms=5")
    c = cluster(2, sets)
    k1 = _key_file(c.dir, "k1", b"the first key: 0123456789abcdef")
    workers = [preduce.Client(c.sock[i], f"a{i}", job="secret", job_key=k1)
               for i in range(2)]
    who, old = c.procs.pop(0)
    old.kill()
    old.wait()
    c._start("sched2", ["--role", "scheduler", "--set",
                        f"scheduler.listen=127.0.0.1:{c.sched_port}",
                        *c._sets(sets)])
    from cluster import wait_for
    wait_for(lambda: "job 'secret' has a key" in c.log("sched2") and
             "job 'secret': worker 1" in c.log("sched2"), 20,
             what="the job's workers back")
    with pytest.raises(preduce.PreduceError) as e:
        preduce.Client(c.sock[1], "x", job="secret")
    assert e.value.errno == errno.EACCES
    both, errors = [], []

    def reduce(cl):
        t = cl.tensor(64)
        for _ in range(200):
            t[:] = 1.0
            try:
                r = cl.reduce([t], timeout_ms=2000)
            except preduce.PreduceError as err:
                errors.append(err)
                continue
            if len(r.members) == 2:
                both.append(cl.name)
                return
    th = [threading.Thread(target=reduce, args=(cl,)) for cl in workers]
    for t in th:
        t.start()
    for t in th:
        t.join(60)
    assert both, f"no group of the two key holders after the restart: " \
                 f"{errors[:3]}"
    for cl in workers:
        cl.close()


def test_killing_one_jobs_trainers_spares_the_other(cluster):
    """Job a: two preduce-trainer processes (PREDUCE_JOB=a), killed with
    SIGKILL mid-run. Job b: two workers of the same model size (650
    floats) reducing meanwhile: none of b's reduces fails, every result is
    b's, and job a ends when its killed trainers' connections close."""
    c = cluster(2, ("scheduler.policy=dynamic", "scheduler.window_ms=5",
                    "scheduler.weighting=uniform"))
    trainer = os.path.join(TOP, "build", "preduce-trainer")
    env = dict(os.environ, PREDUCE_JOB="a")
    procs = [subprocess.Popen([trainer, "--socket", p, "--name", f"t{i}",
                               "--steps", "100000", "--step-ms", "2",
                               "--print-every", "100000"],
                              env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
             for i, p in enumerate(c.sock)]
    values, results, errors = [5.0, 7.0], [], []
    done = threading.Event()

    def worker(i, path):
        try:
            cl = preduce.Client(path, f"b{i}", job="b")
            t = cl.tensor(650)
            while not done.is_set():
                t[:] = values[cl.rank]
                r = cl.reduce([t])
                want = sum(w * values[m] for m, _, w in r.members)
                results.append(float(t[0]) == pytest.approx(want))
            cl.close()
        except Exception as e:
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(i, p))
               for i, p in enumerate(c.sock)]
    for t in threads:
        t.start()
    wait_for_log(c, "job 'a': worker 1", 10)
    threading.Event().wait(0.5)
    for p in procs:
        p.kill()
        p.wait()
    wait_for_log(c, "job 'a' ended", 10)
    before = len(results)
    threading.Event().wait(0.5)
    done.set()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert all(results) and len(results) > before > 0


def wait_for_log(c, text, timeout_s):
    """Waits until the scheduler's log has text."""
    from cluster import wait_for
    wait_for(lambda: text in c.log("sched"), timeout_s, what=text)
