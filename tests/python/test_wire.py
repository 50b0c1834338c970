# SPDX-License-Identifier: MIT
"""preduce.Client(wire=...): the encoding a trainer's floats take between
daemons, from the option or $PREDUCE_WIRE; bad names refused before any
connection. Real daemons."""

import errno

import numpy as np
import pytest
import torch

import preduce
import preduce.torch
from test_torch import run_all, small_net

torch.set_num_threads(1)


@pytest.mark.parametrize("wire", ["fp16", "BF16", "", 16])
def test_bad_wire_is_a_value_error_before_connecting(wire):
    """No daemon listens at the socket: the ValueError comes first."""
    with pytest.raises(ValueError, match="one of 'fp32', 'bf16', 'int8'"):
        preduce.Client("/nonexistent/preduced.sock", "w", wire=wire)


@pytest.mark.parametrize("wires, group, rtol", [
    (("int8", "int8"), "int8", 1 / 32), (("int8", "bf16"), "bf16", 1 / 128),
    (("bf16", "fp32"), "fp32", 1e-6), ((None, None), "fp32", 1e-6)])
def test_wire_option_reduces(cluster, wires, group, rtol):
    """Two workers on two daemons, each with its encoding (None: the
    node's, fp32): the group takes the more precise, both results say
    which, and both get the same mean within what it keeps."""
    c = cluster(2)
    a = preduce.Client(c.sock[0], "a", wire=wires[0])
    b = preduce.Client(c.sock[1], "b", wire=wires[1])
    assert (a.wire, b.wire) == tuple(w or "fp32" for w in wires)
    wa, wb = a.tensor(1000), b.tensor(1000)
    rng = np.random.RandomState(4)
    wa[:] = rng.uniform(1, 2, 1000)
    wb[:] = rng.uniform(1, 2, 1000)
    want = (wa.astype(np.float64) + wb) / 2
    got = run_all([lambda: a.reduce([wa]), lambda: b.reduce([wb])])
    assert [r.wire for r in got] == [group, group]
    assert f"wire={group!r}" in repr(got[0])
    assert np.array_equal(wa, wb)
    assert np.allclose(wa, want, rtol=rtol, atol=0)
    a.close()
    b.close()


def test_wire_from_the_environment(cluster, monkeypatch):
    """$PREDUCE_WIRE when the option is not given; a bad one fails the
    connect with EINVAL, naming the variable; the option wins over it."""
    c = cluster(1)
    monkeypatch.setenv("PREDUCE_WIRE", "bf16")
    with preduce.Client(c.sock[0], "env") as cl:
        assert cl.wire == "bf16"
    monkeypatch.setenv("PREDUCE_WIRE", "fp16")
    with pytest.raises(preduce.PreduceError) as e:
        preduce.Client(c.sock[0], "env2")
    assert e.value.errno == errno.EINVAL
    assert "PREDUCE_WIRE: not one of fp32, bf16, int8" in str(e.value)
    with preduce.Client(c.sock[0], "opt", wire="fp32") as cl:
        assert cl.wire == "fp32"  # the option wins
    assert cl.wire is None  # closed


def test_wire_from_the_node(cluster):
    """Clients that ask for no encoding learn their node's
    transport.wire at connect; their group across two daemons travels in
    it, and a group on one daemon (nothing sent) says fp32."""
    c = cluster(2, node_sets=("transport.wire=bf16",))
    a = preduce.Client(c.sock[0], "a")
    b = preduce.Client(c.sock[1], "b")
    assert (a.wire, b.wire) == ("bf16", "bf16")
    xa, xb = a.tensor(300), b.tensor(300)
    xa[:], xb[:] = 1.5, 2.5
    got = run_all([lambda: a.reduce([xa]), lambda: b.reduce([xb])])
    assert [r.wire for r in got] == ["bf16", "bf16"]
    assert np.array_equal(xa, xb)
    b.close()
    assert a.reduce([xa]).wire == "fp32"  # alone on its daemon
    a.close()


def test_bfloat16_model_over_the_bf16_wire(cluster):
    """A bfloat16 model loses nothing more on the bf16 wire: the replicas
    are the float32 mean cast to bfloat16, as over fp32."""
    c = cluster(2)
    clients = [preduce.Client(c.sock[i], f"w{i}", wire="bf16")
               for i in range(2)]
    nets = [small_net(seed=i).to(torch.bfloat16) for i in range(2)]
    want = [((p.float() + q.float()) / 2).to(torch.bfloat16)
            for p, q in zip(nets[0].parameters(), nets[1].parameters())]
    prs = [preduce.torch.PartialReduce(
        n, torch.optim.SGD(n.parameters(), lr=0.1), cl, average="model")
        for n, cl in zip(nets, clients)]
    run_all([lambda i=i: prs[i].step() for i in range(2)])
    for net in nets:
        for p, w in zip(net.parameters(), want):
            assert torch.equal(p, w)
    for cl in clients:
        cl.close()
