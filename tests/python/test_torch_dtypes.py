# SPDX-License-Identifier: MIT
"""preduce.torch.PartialReduce with bfloat16, float16 and mixed models:
float32 places in the shared memory, cast in before each reduce and back
after a successful one; float64 refused. Real daemons."""

import errno

import pytest
import torch

import preduce
import preduce.torch
from test_torch import run_all, small_net

torch.set_num_threads(1)

HALF = (torch.bfloat16, torch.float16)


def mixed_net(seed):
    """Layers of three dtypes, and a float16 buffer (buffers=True)."""
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8).to(torch.bfloat16),
                              torch.nn.Linear(8, 8),
                              torch.nn.Linear(8, 2).to(torch.float16))
    net.register_buffer("scale", torch.randn(3).to(torch.float16))
    return net


def make_net(kind, seed):
    if kind == "mixed":
        return mixed_net(seed)
    return small_net(seed).to(kind)


KINDS = [torch.bfloat16, torch.float16, "mixed"]


def tensors(net):
    return list(net.parameters()) + list(net.buffers())


def in_flat(pr, t):
    lo = pr.flat.data_ptr()
    return lo <= t.data_ptr() < lo + pr.flat.numel() * 4


def fake_grads(nets, seed):
    """A different gradient for each worker, in each parameter's dtype."""
    torch.manual_seed(seed)
    for net in nets:
        for p in net.parameters():
            p.grad = torch.randn(p.shape).to(p.dtype)


def mean32(a, b):
    """The mean as the daemons compute it: in float32, then cast."""
    return ((a.float() + b.float()) / 2).to(a.dtype)


@pytest.mark.parametrize("kind", KINDS)
def test_model_average_is_the_float32_mean_cast(cluster, kind):
    """average='model': each tensor becomes the mean of the two workers',
    computed in float32 and cast to its dtype; half tensors keep their
    dtype and memory, float32 ones live in the shared memory."""
    c = cluster(2)
    clients = [preduce.Client(c.sock[i], f"w{i}") for i in range(2)]
    nets = [make_net(kind, seed=i) for i in range(2)]
    want = [mean32(a, b) for a, b in zip(tensors(nets[0]),
                                         tensors(nets[1]))]
    dtypes = [t.dtype for t in tensors(nets[0])]
    ptrs = [[t.data_ptr() for t in tensors(n)] for n in nets]
    prs = [preduce.torch.PartialReduce(
        n, torch.optim.SGD(n.parameters(), lr=0.1), cl, average="model",
        buffers=True) for n, cl in zip(nets, clients)]
    for pr, net in zip(prs, nets):
        for t in tensors(net):
            assert in_flat(pr, t) == (t.dtype == torch.float32)
        assert not pr.zero_copy
    half = [[t.data_ptr() for t in tensors(n) if t.dtype in HALF]
            for n in nets]
    run_all([lambda i=i: prs[i].step() for i in range(2)])  # no gradients
    assert [pr.reduces for pr in prs] == [1, 1]
    for i, net in enumerate(nets):
        got = tensors(net)
        assert [t.dtype for t in got] == dtypes
        assert [t.data_ptr() for t in got if t.dtype in HALF] == half[i]
        for t, w in zip(got, want):
            assert torch.equal(t, w)
    if kind != "mixed":
        assert ptrs == [[t.data_ptr() for t in tensors(n)] for n in nets]
    for cl in clients:
        cl.close()
    for t, w in zip(tensors(nets[0]), want):  # moved out, kept
        assert torch.equal(t, w)


@pytest.mark.parametrize("kind", KINDS)
def test_gradient_buckets_are_the_float32_mean_cast(cluster, kind):
    """average='gradients' (the buckets, two of them): each worker steps
    on the mean gradient, computed in float32 and cast to the gradient's
    dtype, exactly as one SGD on that mean would."""
    c = cluster(2)
    clients = [preduce.Client(c.sock[i], f"w{i}") for i in range(2)]
    nets = [make_net(kind, seed=3) for _ in range(2)]
    ref = make_net(kind, seed=3)
    opts = [torch.optim.SGD(n.parameters(), lr=0.5) for n in nets]
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    prs = [preduce.torch.PartialReduce(n, o, cl, bucket_cap_mb=1e-4)
           for n, o, cl in zip(nets, opts, clients)]
    assert len(prs[0]._buckets.buffers) > 1
    for step in range(3):
        fake_grads(nets, seed=step)
        for p, a, b in zip(ref.parameters(), nets[0].parameters(),
                           nets[1].parameters()):
            p.grad = mean32(a.grad, b.grad)
        run_all([lambda i=i: prs[i].step() for i in range(2)])
        ref_opt.step()
    for net in nets:
        for p, q in zip(net.parameters(), ref.parameters()):
            assert p.dtype == q.dtype and torch.equal(p, q)
    assert [pr.failed for pr in prs] == [0, 0]
    for cl in clients:
        cl.close()


def test_bfloat16_trains_with_backward_hooks(cluster):
    """A bfloat16 model trained with real backward passes: the buckets'
    hooks see bfloat16 gradients, and the replicas stay one model."""
    c = cluster(2)
    clients = [preduce.Client(c.sock[i], f"w{i}") for i in range(2)]
    nets = [small_net(seed=i).to(torch.bfloat16) for i in range(2)]
    opts = [torch.optim.SGD(n.parameters(), lr=0.1) for n in nets]
    prs = [preduce.torch.PartialReduce(n, o, cl)
           for n, o, cl in zip(nets, opts, clients)]
    torch.manual_seed(2)
    data = [torch.randn(8, 4).to(torch.bfloat16) for _ in range(2)]

    def train(i):
        for _ in range(3):
            opts[i].zero_grad()
            nets[i](data[i]).pow(2).mean().backward()
            prs[i].step()

    run_all([lambda i=i: train(i) for i in range(2)])
    for p, q in zip(nets[0].parameters(), nets[1].parameters()):
        assert p.dtype == torch.bfloat16 and torch.equal(p, q)
    assert [pr.reduces for pr in prs] == [3, 3]
    for cl in clients:
        cl.close()


def test_consensus_step_copies_half_state(cluster):
    """state=True on a mixed model: one reduce of models, SGD momentum
    and gradients. The half parameters' momentum stays the optimizer's
    own tensor in their dtype, and every replica is one SGD with momentum
    on the float32 mean gradient, cast."""
    c = cluster(2)
    clients = [preduce.Client(c.sock[i], f"w{i}") for i in range(2)]
    nets = [mixed_net(seed=5) for _ in range(2)]
    ref = mixed_net(seed=5)

    def sgd(net):
        return torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)

    opts = [sgd(n) for n in nets]
    ref_opt = sgd(ref)
    prs = [preduce.torch.PartialReduce(n, o, cl, state=True)
           for n, o, cl in zip(nets, opts, clients)]
    assert prs[0].consensus
    for step in range(3):
        fake_grads(nets, seed=10 + step)
        for p, a, b in zip(ref.parameters(), nets[0].parameters(),
                           nets[1].parameters()):
            p.grad = mean32(a.grad, b.grad)
        run_all([lambda i=i: prs[i].step() for i in range(2)])
        ref_opt.step()
    for net, opt, pr in zip(nets, opts, prs):
        for p, q in zip(net.parameters(), ref.parameters()):
            assert torch.equal(p, q)
            buf = opt.state[p]["momentum_buffer"]
            assert buf.dtype == p.dtype
            assert in_flat(pr, p) == (p.dtype == torch.float32)
            assert torch.equal(buf, ref_opt.state[q]["momentum_buffer"])
    for cl in clients:
        cl.close()


def test_overlap_merges_into_half_parameters(cluster):
    """overlap with bfloat16: x += average - snapshot, in float32 and
    cast (every value here is exact in bfloat16)."""
    c = cluster(2)
    clients = [preduce.Client(c.sock[i], f"w{i}") for i in range(2)]
    w = [torch.nn.Parameter(torch.full((4,), float(i),
                                       dtype=torch.bfloat16))
         for i in range(2)]
    mods = []
    for p in w:
        m = torch.nn.Module()
        m.w = p
        mods.append(m)
    opts = [torch.optim.SGD([p], lr=1.0) for p in w]
    prs = [preduce.torch.PartialReduce(m, o, cl, overlap=True)
           for m, o, cl in zip(mods, opts, clients)]

    def two_steps(i):
        for _ in range(2):
            opts[i].zero_grad()
            w[i].grad = torch.ones(4, dtype=torch.bfloat16)
            prs[i].step()
        prs[i].finish()

    run_all([lambda i=i: two_steps(i) for i in range(2)])
    for p in w:  # as test_torch's float32 case: both at -1.5
        assert p.dtype == torch.bfloat16
        assert torch.equal(p.detach(), torch.full((4,), -1.5,
                                                  dtype=torch.bfloat16))
    for cl in clients:
        cl.close()


def test_failed_reduce_leaves_half_tensors_untouched(cluster, monkeypatch):
    """A reduce that fails after the daemon wrote into the shared memory
    (NaN everywhere, then ETIMEDOUT): the half parameters, their
    gradients and their optimizer state are as the optimizer left them;
    the next successful reduce brings the group's values."""
    c = cluster(1)
    cl = preduce.Client(c.sock[0], "w")
    net = small_net(seed=6).to(torch.bfloat16)
    opt = torch.optim.SGD(net.parameters(), lr=0.0, momentum=0.9)
    pr = preduce.torch.PartialReduce(net, opt, cl, average="model",
                                     state=True)
    real = cl.reduce
    failing = [True]

    def reduce(parts, *args, **kw):
        for part in parts:
            part.fill_(float("nan"))
        if failing[0]:
            raise preduce.PreduceError(errno.ETIMEDOUT, "injected")
        return real(parts, *args, **kw)

    monkeypatch.setattr(cl, "reduce", reduce)
    before = [p.detach().clone() for p in net.parameters()]
    fake_grads([net], seed=1)
    grads = [p.grad.clone() for p in net.parameters()]
    pr.step()  # lr 0: the momentum is the gradient, the model unchanged
    assert pr.failed == 1 and pr.reduces == 0
    for p, b, g in zip(net.parameters(), before, grads):
        assert torch.equal(p, b) and torch.equal(p.grad, g)
        assert torch.equal(opt.state[p]["momentum_buffer"], g)
    failing[0] = False  # a group of one: what the NaN left is its mean
    pr.step()
    assert pr.reduces == 1
    assert all(p.isnan().all() for p in net.parameters())
    cl.close()


def test_timed_out_reduce_leaves_a_mixed_model(cluster):
    """A real failure (no peer within timeout_ms) leaves every tensor of
    a mixed model as it was, in its memory."""
    c = cluster(1, sched_sets=("scheduler.policy=allreduce",
                               "scheduler.min_workers=2"))
    cl = preduce.Client(c.sock[0], "w")
    net = mixed_net(seed=7)
    pr = preduce.torch.PartialReduce(
        net, torch.optim.SGD(net.parameters(), lr=0.1), cl,
        average="model", buffers=True, timeout_ms=300)
    before = [(t.data_ptr(), t.detach().clone()) for t in tensors(net)]
    pr.step()
    assert pr.failed == 1 and pr.reduces == 0
    for t, (ptr, b) in zip(tensors(net), before):
        assert t.data_ptr() == ptr and torch.equal(t, b)
    cl.close()


def test_float64_is_refused(cluster):
    """float64 (in a parameter, or a buffer with buffers=True): a
    TypeError naming the tensor and what to do."""
    c = cluster(1)
    cl = preduce.Client(c.sock[0], "w")
    net = small_net().double()
    with pytest.raises(TypeError, match=r"Linear\.weight is torch\.float64"
                       r".*model\.float\(\)"):
        preduce.torch.PartialReduce(net, torch.optim.SGD(net.parameters(),
                                                         lr=0.1), cl)
    net = small_net()
    net.register_buffer("acc", torch.zeros(2, dtype=torch.float64))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with pytest.raises(TypeError, match="acc is torch.float64"):
        preduce.torch.PartialReduce(net, opt, cl, buffers=True)
    preduce.torch.PartialReduce(net, opt, cl)  # buffers left out: fine
    cl.close()
