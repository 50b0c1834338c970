# SPDX-License-Identifier: MIT
"""preduce.torch.PartialReduce(average="gradients"): gradients averaged in
tagged buckets while backward runs, against real daemons."""

import errno
import warnings

import pytest
import torch

import preduce
import preduce.torch
from test_torch import run_all

torch.set_num_threads(1)

FLOATS_16 = 16 * 4 / (1 << 20)  # bucket_cap_mb: buckets of 16 floats


def deep_net(seed=3):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 2))


def loss(net, x):
    return (net(x) - x[:, :2]).pow(2).mean()


def workers(cluster, make_opt, n=2, sched_sets=None, **kw):
    c = (cluster(n) if sched_sets is None
         else cluster(n, sched_sets=sched_sets))
    clients = [preduce.Client(c.sock[i % 2], f"w{i}") for i in range(n)]
    nets = [deep_net() for _ in range(n)]
    opts = [make_opt(m) for m in nets]
    prs = [preduce.torch.PartialReduce(m, o, cl, average="gradients", **kw)
           for m, o, cl in zip(nets, opts, clients)]
    return c, clients, nets, opts, prs


@pytest.mark.parametrize("make_opt", [
    lambda n: torch.optim.SGD(n.parameters(), lr=0.1, momentum=0.9),
    lambda n: torch.optim.AdamW(n.parameters(), lr=0.01),
])
def test_buckets_are_one_step_on_the_concatenated_batch(cluster, make_opt):
    """Buckets of 16 floats (9 for 130 parameters) under allreduce: the replicas stay
    bit-identical and match one optimizer on the mean gradient (the
    concatenated batch), as DistributedDataParallel."""
    _, clients, nets, opts, prs = workers(cluster, make_opt,
                                          bucket_cap_mb=FLOATS_16)
    assert len(prs[0]._buckets.buffers) == 9
    ref = deep_net()
    ref_opt = make_opt(ref)
    torch.manual_seed(5)
    for _ in range(4):
        xs = [torch.randn(8, 4) for _ in range(2)]

        def step(i, xs=xs):
            opts[i].zero_grad()
            loss(nets[i], xs[i]).backward()
            prs[i].step()
        run_all([lambda i=i: step(i) for i in range(2)])
        ref_opt.zero_grad()
        loss(ref, torch.cat(xs)).backward()
        ref_opt.step()
    for p0, p1, q in zip(nets[0].parameters(), nets[1].parameters(),
                         ref.parameters()):
        assert torch.equal(p0, p1)
        assert torch.allclose(p0, q, atol=1e-6)
    assert [pr.reduces for pr in prs] == [4, 4]
    assert [pr.failed for pr in prs] == [0, 0]
    for cl in clients:
        cl.close()


def test_buckets_start_while_backward_runs(cluster):
    """The last layers' buckets are complete before the first layer's
    gradient: their reduces have started when backward reaches it, and
    when backward returns the gradients are the group's mean (as with
    DDP, so that clipping sees them)."""
    _, clients, nets, opts, prs = workers(
        cluster, lambda n: torch.optim.SGD(n.parameters(), lr=0.1),
        bucket_cap_mb=FLOATS_16)
    started, grads = {}, {}
    torch.manual_seed(2)
    xs = [torch.randn(8, 4) for _ in range(2)]

    def step(i):
        def seen(_):
            started.setdefault(i, prs[i]._buckets._next)
        h = nets[i][0].weight.register_hook(seen)
        opts[i].zero_grad()
        loss(nets[i], xs[i]).backward()
        h.remove()
        grads[i] = [p.grad.clone() for p in nets[i].parameters()]
        prs[i].step()
    run_all([lambda i=i: step(i) for i in range(2)])
    assert started[0] >= 1 and started[1] >= 1, started
    ref = deep_net()
    loss(ref, torch.cat(xs)).backward()
    for g0, g1, q in zip(grads[0], grads[1], ref.parameters()):
        assert torch.equal(g0, g1)
        assert torch.allclose(g0, q.grad, atol=1e-6)
    for cl in clients:
        cl.close()


def test_no_sync_and_repeated_backward(cluster):
    """Two micro-batches, the first in no_sync(): the average is of the
    summed gradients. Without no_sync() each backward is averaged at its
    end, and the sum of the averages is the same step."""
    _, clients, nets, opts, prs = workers(
        cluster, lambda n: torch.optim.SGD(n.parameters(), lr=0.1),
        bucket_cap_mb=FLOATS_16)
    ref = deep_net()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    torch.manual_seed(9)
    xs = [[torch.randn(4, 4) for _ in range(2)] for _ in range(2)]

    def step(i, quiet):
        opts[i].zero_grad()
        if quiet:
            with prs[i].no_sync():
                loss(nets[i], xs[i][0]).backward()
        else:
            loss(nets[i], xs[i][0]).backward()
        loss(nets[i], xs[i][1]).backward()
        prs[i].step()

    for quiet in (True, False):
        run_all([lambda i=i: step(i, quiet) for i in range(2)])
        ref_opt.zero_grad()
        for x in (x for pair in xs for x in pair):
            loss(ref, x).backward()
        for p in ref.parameters():
            p.grad /= 2  # the mean over workers of each worker's sum
        ref_opt.step()
        for p0, p1, q in zip(nets[0].parameters(), nets[1].parameters(),
                             ref.parameters()):
            assert torch.equal(p0, p1)
            assert torch.allclose(p0, q, atol=1e-6)
    for cl in clients:
        cl.close()


def test_buckets_under_dynamic_fall_back_to_one_reduce(cluster):
    """state=False (gradients alone) and tags need allreduce: under
    dynamic the first step warns and averages all buckets in one reduce;
    later steps do so silently."""
    _, clients, nets, opts, prs = workers(
        cluster, lambda n: torch.optim.SGD(n.parameters(), lr=0.1),
        sched_sets=("scheduler.policy=dynamic",), bucket_cap_mb=FLOATS_16,
        state=False)
    def step(i):
        opts[i].zero_grad()
        loss(nets[i], torch.randn(8, 4)).backward()
        prs[i].step()

    # One recorder around both threads (catch_warnings is process-wide).
    for expect in (2, 0):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            run_all([lambda i=i: step(i) for i in range(2)])
        said = [str(x.message) for x in w
                if "need scheduler.policy = allreduce" in str(x.message)]
        assert len(said) == expect, said
    assert all(pr._buckets.single for pr in prs)
    assert all(pr.reduces >= 1 for pr in prs)
    # No parameter sync in that mode: untagged, it could meet a peer's
    # gradients.
    assert not any(pr._buckets.need_sync for pr in prs)
    for cl in clients:
        cl.close()


def test_tag_refused_under_dynamic(cluster):
    c = cluster(1, sched_sets=("scheduler.policy=dynamic",))
    cl = preduce.Client(c.sock[0], "w")
    w = cl.tensor(8)
    cl.set_tag(3)
    with pytest.raises(preduce.PreduceError) as e:
        cl.reduce([w], timeout_ms=5000)
    assert e.value.errno == errno.EINVAL
    assert "need scheduler.policy = allreduce" in str(e.value)
    cl.set_tag(0)
    assert len(cl.reduce([w], timeout_ms=5000).members) == 1
    with pytest.raises(ValueError):
        cl.set_tag(-1)
    cl.close()


def test_default_starts_replicas_from_rank_0s_model(cluster):
    """The default under allreduce is DDP's path (buckets, no consensus
    reduces). Replicas built from different seeds take rank 0's model at
    the first step, as DDP's broadcast gives it, and stay bit-identical."""
    c = cluster(2)
    clients = [preduce.Client(c.sock[i], f"w{i}") for i in range(2)]
    nets = [deep_net(seed=i) for i in range(2)]
    first = {cl.rank: [p.detach().clone() for p in n.parameters()]
             for cl, n in zip(clients, nets)}[0]
    opts = [torch.optim.SGD(n.parameters(), lr=0.0) for n in nets]
    prs = [preduce.torch.PartialReduce(n, o, cl)
           for n, o, cl in zip(nets, opts, clients)]
    assert prs[0].average == "gradients" and prs[0]._buckets is not None

    def still(i):
        opts[i].zero_grad()
        loss(nets[i], torch.randn(8, 4)).backward()
        prs[i].step()
    run_all([lambda i=i: still(i) for i in range(2)])
    for net in nets:  # lr 0: the model is the one the sync gave
        for p, q in zip(net.parameters(), first):
            assert torch.equal(p, q)
    for o in opts:
        for g in o.param_groups:
            g["lr"] = 0.01
    for _ in range(3):
        def step(i):
            opts[i].zero_grad()
            loss(nets[i], torch.randn(8, 4)).backward()
            prs[i].step()
        run_all([lambda i=i: step(i) for i in range(2)])
        for p0, p1 in zip(nets[0].parameters(), nets[1].parameters()):
            assert torch.equal(p0, p1)
    assert not any(pr.consensus for pr in prs)
    assert prs[0].sync_seconds > 0
    for cl in clients:
        cl.close()


def test_reload_leaving_allreduce_refuses_queued_tags(tmp_path):
    """A reload from allreduce to dynamic withdraws a queued tagged
    reduce with the refusal a new one gets (dynamic would group it with
    any tag); untagged reduces go on."""
    import signal
    from cluster import Cluster
    conf = tmp_path / "sched.conf"
    conf.write_text("[scheduler]\npolicy = allreduce\n")
    c = Cluster(tmp_path, 2, sched_conf=str(conf))
    try:
        a = preduce.Client(c.sock[0], "a")
        b = preduce.Client(c.sock[1], "b")
        wa = a.tensor(8)
        a.set_tag(1)
        h = a.reduce_start([wa], timeout_ms=20000)  # waits for b
        a.set_tag(0)
        assert not h.done()
        conf.write_text("[scheduler]\npolicy = dynamic\n")
        c.procs[0][1].send_signal(signal.SIGHUP)
        with pytest.raises(preduce.PreduceError) as e:
            h.wait(10000)
        assert e.value.errno == errno.EINVAL
        assert "tagged reduces" in str(e.value)
        assert len(a.reduce([wa], timeout_ms=5000).members) >= 1
        a.close()
        b.close()
    finally:
        assert not c.stop()
