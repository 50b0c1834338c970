# SPDX-License-Identifier: MIT
"""The Python package (client/python/preduce) with torch, against real
daemons: zero-copy torch tensors, background reduces, errors, and
preduce.torch.PartialReduce training a model. Trainers that must reduce
together run in threads (ctypes lets go of the GIL while libpreduce
waits)."""

import errno
import threading
import time

import numpy as np
import pytest
import torch

import preduce
import preduce.torch

torch.set_num_threads(1)


def run_all(fns):
    """Runs each fn in a thread; re-raises the first exception, else
    returns what each returned."""
    errors = []
    results = [None] * len(fns)

    def wrap(i, fn):
        try:
            results[i] = fn()
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i, f))
               for i, f in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a trainer hung"
    if errors:
        raise errors[0]
    return results


def test_torch_tensor_over_shared_memory_zero_copy(cluster):
    """A write through a torch tensor over the shared array is what the
    daemon reduces, and the result lands in the same memory."""
    c = cluster(2)
    a = preduce.Client(c.sock[0], "a")
    b = preduce.Client(c.sock[1], "b")
    ta = torch.from_numpy(a.tensor(1000))
    tb = torch.from_numpy(b.tensor(1000))
    ptr_a, ptr_b = ta.data_ptr(), tb.data_ptr()
    ta.fill_(1.0)
    tb.copy_(torch.arange(1000, dtype=torch.float32))
    ha = a.reduce_start([ta])
    hb = b.reduce_start([tb])
    ra, rb = ha.wait(), hb.wait()
    want = (1.0 + torch.arange(1000, dtype=torch.float32)) / 2
    assert torch.equal(ta, want) and torch.equal(tb, want)
    assert ta.data_ptr() == ptr_a and tb.data_ptr() == ptr_b
    assert ra.group == rb.group and len(ra.members) == 2
    assert ra.weight == pytest.approx(0.5)
    a.close()
    b.close()


def test_reduce_start_done_wait(cluster):
    """A background reduce is not done until its group could form."""
    c = cluster(2)
    a = preduce.Client(c.sock[0], "a")
    b = preduce.Client(c.sock[1], "b")
    wa, wb = a.tensor(8), b.tensor(8)
    wa[:], wb[:] = 2.0, 4.0
    h = a.reduce_start([wa])
    assert not h.done()
    with pytest.raises(TimeoutError):
        h.wait(50)
    r = b.reduce([wb], timeout_ms=10000)
    assert h.wait(10000).group == r.group
    assert h.done() and np.all(wa == 3.0) and np.all(wb == 3.0)
    a.close()
    b.close()


def test_errors_raise_with_errno_text_and_retryable(cluster):
    c = cluster(1, sched_sets=("scheduler.policy=allreduce",
                               "scheduler.min_workers=2"),
                node_sets=("node.max_tensor_mb=1",))
    a = preduce.Client(c.sock[0], "a")
    w = a.tensor(16)
    with pytest.raises(preduce.PreduceError) as e:
        a.reduce([w], timeout_ms=300)  # nobody to form a group with
    assert e.value.errno == errno.ETIMEDOUT and e.value.retryable
    with pytest.raises(preduce.PreduceError) as e:
        a.reduce([np.zeros(16, dtype=np.float32)])
    assert e.value.errno == errno.EINVAL and not e.value.retryable
    assert "not a whole tensor of this client" in str(e.value)
    with pytest.raises(preduce.PreduceError) as e:
        a.reduce([torch.from_numpy(w)[:8]])  # a part is not a tensor
    assert e.value.errno == errno.EINVAL
    with pytest.raises(preduce.PreduceError) as e:
        a.tensor(262145)  # over node.max_tensor_mb
    assert e.value.errno == errno.EINVAL
    assert "must be 1..262144 (max_tensor_mb)" in str(e.value)
    assert preduce.retryable(errno.ECONNRESET)
    assert not preduce.retryable(errno.ENOTCONN)
    a.close()


def test_layout_mismatch_names_both_layouts(cluster):
    c = cluster(1, sched_sets=("scheduler.policy=dynamic",
                               "scheduler.window_ms=5"))
    a = preduce.Client(c.sock[0], "a")
    b = preduce.Client(c.sock[0], "b")
    a.reduce([a.tensor(100)])
    with pytest.raises(preduce.PreduceError) as e:
        b.reduce([b.tensor(60)])
    assert e.value.errno == errno.EINVAL
    assert "reduce of 60 floats, but this job reduces 100" in str(e.value)
    a.close()
    b.close()


def small_net(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 2))


def test_partial_reduce_parameters_are_views_of_shared_memory(cluster):
    c = cluster(2)
    clients = [preduce.Client(c.sock[i], f"w{i}") for i in range(2)]
    nets = [small_net(seed=i) for i in range(2)]
    opts = [torch.optim.SGD(n.parameters(), lr=0.1, momentum=0.9)
            for n in nets]
    prs = [preduce.torch.PartialReduce(n, o, cl)
           for n, o, cl in zip(nets, opts, clients)]
    for pr, net in zip(prs, nets):
        lo = pr.flat.data_ptr()
        hi = lo + pr.flat.numel() * 4
        for p in net.parameters():
            assert lo <= p.data_ptr() < hi  # zero copy: inside the flat
        assert pr.zero_copy
    ptrs = [[p.data_ptr() for p in n.parameters()] for n in nets]
    x = torch.randn(16, 4)

    def train(i):
        for _ in range(3):
            opts[i].zero_grad()
            nets[i](x).pow(2).mean().backward()
            prs[i].step()

    run_all([lambda i=i: train(i) for i in range(2)])
    # allreduce: after the last average both replicas are the same model,
    # in the same memory as before, and the optimizer kept its state.
    for p0, p1 in zip(nets[0].parameters(), nets[1].parameters()):
        assert torch.allclose(p0, p1, atol=1e-7)
    assert ptrs == [[p.data_ptr() for p in n.parameters()] for n in nets]
    assert all(len(o.state) == 4 for o in opts)
    assert [pr.reduces for pr in prs] == [3, 3]
    for cl in clients:
        cl.close()


def test_period_averages_every_h_steps(cluster):
    """period=3 (local SGD): 6 optimizer steps, 2 averages; between them
    the replicas drift apart, after one they are the same model."""
    c = cluster(2)
    clients = [preduce.Client(c.sock[i], f"w{i}") for i in range(2)]
    nets = [small_net(seed=i) for i in range(2)]
    opts = [torch.optim.SGD(n.parameters(), lr=0.1) for n in nets]
    prs = [preduce.torch.PartialReduce(n, o, cl, period=3)
           for n, o, cl in zip(nets, opts, clients)]
    x = torch.randn(8, 4)
    same = []

    def step(i):
        opts[i].zero_grad()
        nets[i](x * (i + 1)).pow(2).mean().backward()
        prs[i].step()

    for _ in range(6):
        run_all([lambda i=i: step(i) for i in range(2)])
        same.append(all(torch.equal(p, q) for p, q in
                        zip(nets[0].parameters(), nets[1].parameters())))
    assert [pr.reduces for pr in prs] == [2, 2]
    assert same == [False, False, True, False, False, True]
    for cl in clients:
        cl.close()


def test_gradient_average_is_ddp_with_all_workers(cluster):
    """average='gradients' under allreduce: every replica takes the step
    of the mean gradient, as DistributedDataParallel would."""
    c = cluster(2)
    clients = [preduce.Client(c.sock[i], f"w{i}") for i in range(2)]
    nets = [small_net(seed=7) for _ in range(2)]
    ref = small_net(seed=7)
    opts = [torch.optim.SGD(n.parameters(), lr=0.1) for n in nets]
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    prs = [preduce.torch.PartialReduce(n, o, cl, average="gradients")
           for n, o, cl in zip(nets, opts, clients)]
    torch.manual_seed(1)
    data = [torch.randn(8, 4) for _ in range(2)]
    for _ in range(4):
        def step(i):
            opts[i].zero_grad()
            nets[i](data[i]).pow(2).mean().backward()
            prs[i].step()
        run_all([lambda i=i: step(i) for i in range(2)])
        ref_opt.zero_grad()
        grads = []
        for d in data:
            ref.zero_grad()
            ref(d).pow(2).mean().backward()
            grads.append([p.grad.clone() for p in ref.parameters()])
        for p, g0, g1 in zip(ref.parameters(), *grads):
            p.grad = (g0 + g1) / 2
        ref_opt.step()
    for net in nets:
        for p, q in zip(net.parameters(), ref.parameters()):
            assert torch.allclose(p, q, atol=1e-6)
    for cl in clients:
        cl.close()


def test_outer_optimizer_without_momentum_is_the_average(cluster):
    """outer_lr = 1 and no momentum: the anchor moves to the average."""
    c = cluster(2)
    clients = [preduce.Client(c.sock[i], f"w{i}") for i in range(2)]
    nets = [small_net(seed=i) for i in range(2)]
    plain = [small_net(seed=i) for i in range(2)]
    avg0 = [(p + q) / 2 for p, q in zip(plain[0].parameters(),
                                        plain[1].parameters())]
    opts = [torch.optim.SGD(n.parameters(), lr=0.0) for n in nets]
    prs = [preduce.torch.PartialReduce(n, o, cl, outer_lr=1.0,
                                       outer_momentum=0.0)
           for n, o, cl in zip(nets, opts, clients)]
    run_all([lambda i=i: prs[i].step() for i in range(2)])
    for net in nets:
        for p, a in zip(net.parameters(), avg0):
            assert torch.allclose(p, a, atol=1e-6)
    for cl in clients:
        cl.close()


def test_outer_optimizer_healer_takes_the_model(cluster):
    """With the outer optimizer a healing joiner's model and anchor become
    its group's average, and its momentum starts at zero: no outer step
    from its own stale anchor (which would keep 30% of it at lr 0.7)."""
    c = cluster(2)
    a = preduce.Client(c.sock[0], "a")
    b = preduce.Client(c.sock[1], "b")
    nets = [small_net(seed=1), small_net(seed=2)]
    prs = [preduce.torch.PartialReduce(
        n, torch.optim.SGD(n.parameters(), lr=0.0), cl, outer_lr=0.7,
        outer_momentum=0.9) for n, cl in zip(nets, (a, b))]
    for _ in range(3):  # the job goes past version 1
        run_all([lambda i=i: prs[i].step() for i in range(2)])
    # The inner optimizer does not move the models: these are sent next.
    want = [(p.detach().double() + q.detach().double()) / 2
            for p, q in zip(nets[0].parameters(), nets[1].parameters())]
    j = preduce.Client(c.sock[0], "joiner")
    jnet = small_net(seed=99)
    jpr = preduce.torch.PartialReduce(
        jnet, torch.optim.SGD(jnet.parameters(), lr=0.0), j, outer_lr=0.7,
        outer_momentum=0.9)
    run_all([lambda: prs[0].step(), lambda: prs[1].step(),
             lambda: jpr.step()])
    assert jpr.last_result.weight == 0.0
    for p, w in zip(jnet.parameters(), want):
        assert torch.allclose(p.double(), w, atol=1e-6)
    assert torch.equal(jpr._anchor, jpr.flat)
    assert not jpr._momentum.any()
    for cl in (a, b, j):
        cl.close()


def test_model_outlives_client_close(cluster):
    """close() moves a PartialReduce's parameters out of the shared memory
    first: the model stays usable (and savable) after the client is gone,
    and a further step() says why it cannot average."""
    import io
    c = cluster(1)
    cl = preduce.Client(c.sock[0], "w")
    net = small_net(seed=4)
    pr = preduce.torch.PartialReduce(
        net, torch.optim.SGD(net.parameters(), lr=0.1), cl)
    net(torch.randn(2, 4)).sum().backward()
    pr.step()
    before = [p.detach().clone() for p in net.parameters()]
    lo, hi = pr.flat.data_ptr(), pr.flat.data_ptr() + pr.flat.numel() * 4
    cl.close()
    assert pr.closed and cl.closed
    for p, q in zip(net.parameters(), before):
        assert not lo <= p.data_ptr() < hi  # out of the unmapped memory
        assert torch.equal(p, q)
    net(torch.randn(2, 4)).sum().backward()  # usable: no fault
    torch.save(net.state_dict(), io.BytesIO())
    with pytest.raises(RuntimeError, match="client was closed"):
        pr.step()


def test_gradient_average_refuses_a_period(cluster):
    c = cluster(1)
    cl = preduce.Client(c.sock[0], "w")
    net = small_net()
    with pytest.raises(ValueError, match="period must be 1"):
        preduce.torch.PartialReduce(net, torch.optim.SGD(net.parameters(),
                                                         lr=0.1), cl,
                                    average="gradients", period=4)
    cl.close()


def test_overlap_merges_local_progress(cluster):
    """overlap: the average of step t arrives during step t+1 and is
    merged as x += average - snapshot."""
    c = cluster(2)
    clients = [preduce.Client(c.sock[i], f"w{i}") for i in range(2)]
    w = [torch.nn.Parameter(torch.full((4,), float(i))) for i in range(2)]
    mods = []
    for p in w:
        m = torch.nn.Module()
        m.w = p
        mods.append(m)
    opts = [torch.optim.SGD([p], lr=1.0) for p in w]
    prs = [preduce.torch.PartialReduce(m, o, cl, overlap=True)
           for m, o, cl in zip(mods, opts, clients)]
    assert not prs[0].zero_copy

    def two_steps(i):
        for _ in range(2):
            opts[i].zero_grad()
            w[i].grad = torch.ones(4)   # each step: x -= 1
            prs[i].step()
        prs[i].finish()

    run_all([lambda i=i: two_steps(i) for i in range(2)])
    # Step 1: x0 = -1, x1 = 0 are sent (snapshots); their average is -0.5.
    # Step 2: x0 = -2, x1 = -1, and merging the first average adds
    # -0.5 - (-1) and -0.5 - 0: both -1.5, which the second average (of
    # -1.5 and -1.5) leaves as it is.
    for p in w:
        assert torch.allclose(p.detach(), torch.full((4,), -1.5))
    assert [pr.reduces for pr in prs] == [2, 2]
    for cl in clients:
        cl.close()


def test_fresh_joiner_heals_without_moving_the_others(cluster):
    """A worker that joins a job which has gone past version 1 takes its
    first group's model and gives none of its own: the others' mean is
    exactly what it would have been without it."""
    c = cluster(2)
    a = preduce.Client(c.sock[0], "a")
    b = preduce.Client(c.sock[1], "b")
    wa, wb = a.tensor(64), b.tensor(64)
    rng = np.random.RandomState(3)
    for _ in range(3):  # the job goes to version 3
        wa[:] = rng.rand(64)
        wb[:] = rng.rand(64)
        run_all([lambda: a.reduce([wa]), lambda: b.reduce([wb])])
    assert np.array_equal(wa, wb)
    j = preduce.Client(c.sock[0], "joiner")
    wj = j.tensor(64)
    wj[:] = 1000.0  # a fresh, very different model
    wa[:] = rng.rand(64)
    wb[:] = rng.rand(64)
    want = (wa.astype(np.float64) + wb) / 2
    results = {}
    run_all([lambda: results.update(a=a.reduce([wa])),
             lambda: results.update(b=b.reduce([wb])),
             lambda: results.update(j=j.reduce([wj]))])
    for w in (wa, wb, wj):
        assert np.allclose(w, want, rtol=1e-6, atol=0)
    weights = {m[0]: m[2] for m in results["j"].members}
    assert weights[j.rank] == 0.0
    assert weights[a.rank] == pytest.approx(0.5)
    assert results["j"].version == results["a"].version
    assert "heals" not in c.log("sched")  # it needed no asking
    # Asked for: b comes back from an old checkpoint and heals likewise.
    b.set_heal()
    wa[:], wb[:], wj[:] = 1.0, 500.0, 3.0
    run_all([lambda: a.reduce([wa]), lambda: b.reduce([wb]),
             lambda: j.reduce([wj])])
    assert np.allclose(wb, 2.0) and np.allclose(wa, 2.0)
    assert "worker 1 (b) heals" in c.log("sched")
    for cl in (a, b, j):
        cl.close()


def test_joiner_reaches_the_others_accuracy(cluster):
    """PartialReduce trains a model to its target on 2 daemons x 2
    trainers, and a worker joining mid-run is as good as the others within
    a few steps (it takes their model)."""
    c = cluster(2, sched_sets=("scheduler.policy=dynamic",))
    torch.manual_seed(0)
    x = torch.randn(512, 4)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    trained = threading.Event()

    def acc(net):
        with torch.no_grad():
            return (net(x).argmax(1) == y).float().mean().item()

    def worker(name, sock, steps, seed, out, start=None, mark=None):
        if start is not None:
            assert start.wait(60)
        cl = preduce.Client(sock, name)
        net = small_net(seed)
        opt = torch.optim.SGD(net.parameters(), lr=0.2)
        pr = preduce.torch.PartialReduce(net, opt, cl)
        out[name] = [acc(net)]
        for s in range(steps):
            i = torch.randint(0, 512, (32,))
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x[i]), y[i]).backward()
            pr.step()
            out[name].append(acc(net))
            if mark is not None and s == 150:
                mark.set()
            time.sleep(0.002)
        cl.close()

    out = {}
    run_all([lambda: worker("a", c.sock[0], 250, 1, out, mark=trained),
             lambda: worker("b", c.sock[0], 250, 2, out),
             lambda: worker("c", c.sock[1], 250, 3, out),
             lambda: worker("d", c.sock[1], 250, 4, out),
             lambda: worker("late", c.sock[1], 5, 9, out, start=trained)])
    # 2 daemons x 2 trainers reach the target, the joiner within a few
    # steps of its arrival.
    assert min(out[w][-1] for w in "abcd") > 0.9
    assert out["a"][150] > 0.9
    assert out["late"][0] < 0.8          # a fresh model
    assert max(out["late"][1:]) > out["a"][150] - 0.05
