# SPDX-License-Identifier: MIT
"""preduce.torch.PartialReduce(state=True): the optimizer's moments live in
shared memory and are averaged with the model, against real daemons."""

import errno
import io
import warnings

import pytest
import torch

import preduce
import preduce.torch
from test_torch import run_all, small_net

torch.set_num_threads(1)


def adamw(net):
    return torch.optim.AdamW(net.parameters(), lr=0.01, betas=(0.9, 0.99),
                             weight_decay=0.1)


def pair(cluster, make_opt, **kw):
    """Two workers on two daemons, same start, each with its optimizer
    and a PartialReduce."""
    c = cluster(2)
    clients = [preduce.Client(c.sock[i], f"w{i}") for i in range(2)]
    nets = [small_net(seed=5) for _ in range(2)]
    opts = [make_opt(n) for n in nets]
    prs = [preduce.torch.PartialReduce(n, o, cl, **kw)
           for n, o, cl in zip(nets, opts, clients)]
    return clients, nets, opts, prs


def batches(steps, workers=2):
    torch.manual_seed(11)
    return [[torch.randn(8, 4) for _ in range(workers)]
            for _ in range(steps)]


def in_shared(pr, t):
    """t lies in one of pr's shared state tensors."""
    return any(s.data_ptr() <= t.data_ptr() < s.data_ptr() + s.numel() * 4
               for s in pr._state)


def loss(net, x):
    return (net(x) - x[:, :2]).pow(2).mean()


def test_gradients_with_state_is_one_adamw_on_the_mean_gradient(cluster):
    """average='gradients', state=True under allreduce: both replicas
    stay bit-identical and follow one AdamW on the mean gradient (what
    DistributedDataParallel computes), moments included."""
    clients, nets, opts, prs = pair(cluster, adamw, average="gradients",
                                    state=True)
    ref = small_net(seed=5)
    ref_opt = adamw(ref)
    for xs in batches(5):
        def step(i, xs=xs):
            opts[i].zero_grad()
            loss(nets[i], xs[i]).backward()
            prs[i].step()
        run_all([lambda i=i: step(i) for i in range(2)])
        grads = []
        for x in xs:
            ref.zero_grad()
            loss(ref, x).backward()
            grads.append([p.grad.clone() for p in ref.parameters()])
        for p, g0, g1 in zip(ref.parameters(), *grads):
            p.grad = (g0 + g1) / 2
        ref_opt.step()
    for p0, p1, q in zip(nets[0].parameters(), nets[1].parameters(),
                         ref.parameters()):
        assert torch.equal(p0, p1)
        assert torch.allclose(p0, q, atol=1e-6)
        for name in ("exp_avg", "exp_avg_sq"):
            s0, s1 = opts[0].state[p0][name], opts[1].state[p1][name]
            assert torch.equal(s0, s1)
            assert torch.allclose(s0, ref_opt.state[q][name], atol=1e-6)
    assert [pr.reduces for pr in prs] == [5, 5]
    for cl in clients:
        cl.close()


def test_model_with_state_averages_the_moments(cluster):
    """average='model', state=True: after a step and a reduce both
    workers hold the mean of the models and of the moments each worker's
    own AdamW step produced."""
    clients, nets, opts, prs = pair(cluster, adamw, state=True,
                                    average="model")
    lone = [small_net(seed=5) for _ in range(2)]
    lone_opts = [adamw(n) for n in lone]
    xs = batches(1)[0]
    for net, opt, x in zip(lone, lone_opts, xs):
        loss(net, x).backward()
        opt.step()

    def step(i):
        opts[i].zero_grad()
        loss(nets[i], xs[i]).backward()
        prs[i].step()
    run_all([lambda i=i: step(i) for i in range(2)])
    for k, (p0, p1) in enumerate(zip(nets[0].parameters(),
                                     nets[1].parameters())):
        q0, q1 = list(lone[0].parameters())[k], list(lone[1].parameters())[k]
        assert torch.allclose(p0, (q0 + q1) / 2, atol=1e-7)
        for name in ("exp_avg", "exp_avg_sq"):
            want = (lone_opts[0].state[q0][name] +
                    lone_opts[1].state[q1][name]) / 2
            assert torch.allclose(opts[0].state[p0][name], want, atol=1e-9)
            assert torch.equal(opts[0].state[p0][name],
                               opts[1].state[p1][name])
        assert opts[0].state[p0]["step"].item() == 1.0
    for cl in clients:
        cl.close()


def test_state_is_shared_memory_and_survives_load_state_dict(cluster):
    """The moments are views of the shared state tensor; an optimizer
    load_state_dict() puts new tensors in, which the next step binds
    again, with the loaded values."""
    clients, nets, opts, prs = pair(cluster, adamw, state=True)

    def inside(i):
        return all(in_shared(prs[i], s[name])
                   for s in opts[i].state.values()
                   for name in ("exp_avg", "exp_avg_sq"))

    assert inside(0) and inside(1)
    xs = batches(2)

    def step(i, k):
        opts[i].zero_grad()
        loss(nets[i], xs[k][i]).backward()
        prs[i].step()
    run_all([lambda i=i: step(i, 0) for i in range(2)])
    buf = io.BytesIO()
    torch.save(opts[0].state_dict(), buf)
    buf.seek(0)
    saved = torch.load(buf)
    for st in saved["state"].values():
        st["exp_avg"].fill_(7.0)  # recognisable
    opts[0].load_state_dict(saved)
    assert not inside(0)
    p0 = next(nets[0].parameters())
    prs[0]._parts()  # what the next step's reduce does first
    assert inside(0)
    assert torch.all(opts[0].state[p0]["exp_avg"] == 7.0)
    run_all([lambda i=i: step(i, 1) for i in range(2)])
    assert inside(0) and inside(1)
    for cl in clients:
        cl.close()


def test_sgd_momentum_state(cluster):
    """SGD's momentum buffer is averaged too (model mode: each worker's
    own step, then the mean of models and buffers); its first step from
    the zeros it is given is the step it takes from nothing."""
    def sgd(n):
        return torch.optim.SGD(n.parameters(), lr=0.1, momentum=0.9)
    clients, nets, opts, prs = pair(cluster, sgd, state=True,
                                    average="model")
    lone = [small_net(seed=5) for _ in range(2)]
    lone_opts = [sgd(n) for n in lone]
    xs = batches(1)[0]

    def step(i):
        opts[i].zero_grad()
        loss(nets[i], xs[i]).backward()
        prs[i].step()
    run_all([lambda i=i: step(i) for i in range(2)])
    for net, opt, x in zip(lone, lone_opts, xs):
        loss(net, x).backward()
        opt.step()
    for p, q0, q1 in zip(nets[0].parameters(), lone[0].parameters(),
                         lone[1].parameters()):
        assert torch.allclose(p, (q0 + q1) / 2, atol=1e-7)
        want = (lone_opts[0].state[q0]["momentum_buffer"] +
                lone_opts[1].state[q1]["momentum_buffer"]) / 2
        assert not torch.allclose(want, lone_opts[0].state[q0][
            "momentum_buffer"])  # the two workers' buffers differ
        assert torch.allclose(opts[0].state[p]["momentum_buffer"], want,
                              atol=1e-7)
    for cl in clients:
        cl.close()


def test_close_moves_the_state_out(cluster):
    """close() gives the optimizer ordinary tensors with the same values;
    training can go on without the client."""
    c = cluster(1)
    cl = preduce.Client(c.sock[0], "w")
    net = small_net(seed=2)
    opt = adamw(net)
    pr = preduce.torch.PartialReduce(net, opt, cl, state=True)
    loss(net, torch.randn(4, 4)).backward()
    pr.step()
    shared = list(pr._state)
    before = {id(p): s["exp_avg"].clone() for p, s in opt.state.items()}
    assert all(in_shared(pr, s["exp_avg"]) for s in opt.state.values())
    cl.close()
    for p, s in opt.state.items():
        assert not any(t.data_ptr() <= s["exp_avg"].data_ptr() <
                       t.data_ptr() + t.numel() * 4 for t in shared)
        assert torch.equal(s["exp_avg"], before[id(p)])
    loss(net, torch.randn(4, 4)).backward()
    opt.step()  # no fault: nothing points into the unmapped memory


@pytest.mark.parametrize("make_opt, kw, err, match", [
    (lambda n: torch.optim.Adagrad(n.parameters()), {}, TypeError,
     "Adagrad's state is not known"),
    (lambda n: torch.optim.SGD(n.parameters(), lr=0.1), {}, ValueError,
     "no momentum"),
    (lambda n: torch.optim.SGD(n.parameters(), lr=0.1, momentum=0.9,
                               dampening=0.1), {}, ValueError,
     "dampening"),
    (adamw, {"overlap": True}, ValueError, "does not combine"),
    (adamw, {"outer_lr": 0.7}, ValueError, "does not combine"),
])
def test_state_refusals(cluster, make_opt, kw, err, match):
    c = cluster(1)
    cl = preduce.Client(c.sock[0], "w")
    net = small_net()
    with pytest.raises(err, match=match):
        preduce.torch.PartialReduce(net, make_opt(net), cl, state=True,
                                    **kw)
    cl.close()


def test_amsgrad_and_frozen_parameters(cluster):
    """AdamW with amsgrad averages its third moment too; a frozen
    parameter (no gradient, not in the optimizer) keeps zero state and
    the same value on both replicas."""
    def ams(n):
        n[0].bias.requires_grad_(False)
        return torch.optim.AdamW([p for p in n.parameters()
                                  if p.requires_grad], lr=0.01,
                                 amsgrad=True)
    clients, nets, opts, prs = pair(cluster, ams, state=True)
    assert prs[0]._state_names == ("exp_avg", "exp_avg_sq",
                                   "max_exp_avg_sq")
    xs = batches(1)[0]

    def step(i):
        opts[i].zero_grad()
        loss(nets[i], xs[i]).backward()
        prs[i].step()
    run_all([lambda i=i: step(i) for i in range(2)])
    for p0, p1 in zip(nets[0].parameters(), nets[1].parameters()):
        assert torch.equal(p0, p1)
        if p0.requires_grad:
            assert torch.equal(opts[0].state[p0]["max_exp_avg_sq"],
                               opts[1].state[p1]["max_exp_avg_sq"])
    assert nets[0][0].bias not in opts[0].state
    for cl in clients:
        cl.close()


def test_default_under_dynamic_is_a_consensus_step(cluster):
    """The default under a partial policy: the scheduler refuses the
    buckets' tags, and the first step becomes (with no warning) a
    consensus step, one reduce of models, moments and gradients: a
    group's members leave it with one model and one optimizer state."""
    c = cluster(2, sched_sets=("scheduler.policy=dynamic",
                               "scheduler.group_max=2",
                               "scheduler.window_ms=2000",
                               "scheduler.window_max_ms=2000"))
    clients = [preduce.Client(c.sock[i], f"w{i}") for i in range(2)]
    nets = [small_net(seed=i) for i in range(2)]
    opts = [adamw(n) for n in nets]
    prs = [preduce.torch.PartialReduce(n, o, cl)
           for n, o, cl in zip(nets, opts, clients)]
    xs = batches(1)[0]

    def step(i):
        opts[i].zero_grad()
        loss(nets[i], xs[i]).backward()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            prs[i].step()
    run_all([lambda i=i: step(i) for i in range(2)])
    assert all(pr.consensus for pr in prs)
    assert [len(pr.last_result.members) for pr in prs] == [2, 2]
    for p0, p1 in zip(nets[0].parameters(), nets[1].parameters()):
        assert torch.equal(p0, p1)
        for name in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(opts[0].state[p0][name],
                               opts[1].state[p1][name])
    for cl in clients:
        cl.close()


@pytest.mark.parametrize("where", ["option", "node"])
def test_int8_wire_keeps_moments_local(cluster, where):
    """Over an int8 wire, asked for by the client (wire=) or by its node
    (transport.wire), Adam's moments are not taken from the average:
    int8 rounds a block's small second moments to 0, its error feedback
    can turn them negative (NaN in AdamW's square root), and a first
    moment rounded to its block's step beside a small second moment of
    this worker's is a step of many learning rates. Each worker keeps the
    moments its own step made; the model is averaged (within int8's
    loss), and the result says the group went in int8."""
    node = ("transport.wire=int8",) if where == "node" else ()
    c = cluster(2, node_sets=node)
    wire = "int8" if where == "option" else None
    clients = [preduce.Client(c.sock[i], f"w{i}", wire=wire)
               for i in range(2)]
    assert [cl.wire for cl in clients] == ["int8", "int8"]
    nets = [small_net(seed=5) for _ in range(2)]
    opts = [adamw(n) for n in nets]
    with pytest.warns(UserWarning, match="moments stay each worker's own"):
        prs = [preduce.torch.PartialReduce(n, o, cl, state=True,
                                           average="model")
               for n, o, cl in zip(nets, opts, clients)]
    lone = [small_net(seed=5) for _ in range(2)]
    lone_opts = [adamw(n) for n in lone]
    xs = [torch.randn(8, 4) * (1 + 3 * i) for i in range(2)]
    for net, opt, x in zip(lone, lone_opts, xs):
        loss(net, x).backward()
        opt.step()

    def step(i):
        opts[i].zero_grad()
        loss(nets[i], xs[i]).backward()
        prs[i].step()
    run_all([lambda i=i: step(i) for i in range(2)])
    assert [pr.last_result.wire for pr in prs] == ["int8", "int8"]
    differ = False
    for k, (p0, p1) in enumerate(zip(nets[0].parameters(),
                                     nets[1].parameters())):
        q = [list(n.parameters())[k] for n in lone]
        assert torch.equal(p0, p1)
        assert torch.allclose(p0, (q[0] + q[1]) / 2, atol=0.02)
        for name in ("exp_avg", "exp_avg_sq"):
            for i, p in enumerate((p0, p1)):
                own = opts[i].state[p][name]
                assert torch.equal(own, lone_opts[i].state[q[i]][name])
            differ |= not torch.equal(opts[0].state[p0][name],
                                      opts[1].state[p1][name])
    assert differ  # each kept its own, not one average
    for cl in clients:
        cl.close()


def test_int8_and_bf16_workers_disagree_by_default_raise(cluster):
    """The default (state=None) turns to consensus steps under a policy
    of partial groups and takes a refusal of the new length as the
    switch's for a while; when it stays refused (one worker over int8,
    whose steps leave the moments out, the other over bf16) the refused
    worker raises EINVAL saying why, rather than train alone for ever."""
    c = cluster(2, sched_sets=("scheduler.policy=dynamic",))
    clients = [preduce.Client(c.sock[0], "w0", wire="int8"),
               preduce.Client(c.sock[1], "w1", wire="bf16")]
    nets = [small_net(seed=5) for _ in range(2)]
    opts = [adamw(n) for n in nets]
    prs = [preduce.torch.PartialReduce(n, o, cl)
           for n, o, cl in zip(nets, opts, clients)]
    errors = []

    def train(i):
        x = torch.randn(8, 4)
        try:
            for _ in range(3 * preduce.torch.HEALTH_WINDOW):
                opts[i].zero_grad()
                loss(nets[i], x).backward()
                prs[i].step()
        except preduce.PreduceError as e:
            errors.append(e)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # alone for a while
        run_all([lambda i=i: train(i) for i in range(2)])
    assert len(errors) == 1 and errors[0].errno == errno.EINVAL
    assert "this job reduces" in str(errors[0])
    assert "int8 or none" in str(errors[0])
    for cl in clients:
        cl.close()


def test_int8_and_bf16_workers_disagree_on_the_layout(cluster):
    """Over int8 the moments are not sent, so an int8 worker's consensus
    step is shorter than a bf16 worker's: the scheduler keeps the job's
    layout (a tie goes to the first) and refuses the other with EINVAL,
    naming both, rather than average parts of different meaning. And
    state=True says so."""
    c = cluster(2, sched_sets=("scheduler.policy=dynamic",))
    clients = [preduce.Client(c.sock[0], "w0", wire="int8"),
               preduce.Client(c.sock[1], "w1", wire="bf16")]
    nets = [small_net(seed=5) for _ in range(2)]
    opts = [adamw(n) for n in nets]
    with pytest.warns(UserWarning, match="moments stay each worker's own"):
        short = preduce.torch.PartialReduce(nets[0], opts[0], clients[0],
                                            state=True, average="model")
    full = preduce.torch.PartialReduce(nets[1], opts[1], clients[1],
                                       state=True, average="model")
    x = torch.randn(8, 4)
    for pr, net, opt in ((short, nets[0], opts[0]), (full, nets[1], opts[1])):
        opt.zero_grad()
        loss(net, x).backward()
    errors = []

    def step(pr):
        try:
            pr.step()
        except preduce.PreduceError as e:
            errors.append(e)
    run_all([lambda: step(short), lambda: step(full)])
    # The second READY to come is refused; the first is a group of one.
    assert len(errors) == 1 and errors[0].errno == errno.EINVAL
    assert "reduce of" in str(errors[0])
    for cl in clients:
        cl.close()
