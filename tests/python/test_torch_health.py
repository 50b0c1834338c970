# SPDX-License-Identifier: MIT
"""PartialReduce's warnings for a worker that trains alone: its averages
keep failing, or it stays in groups of one. Real daemons."""

import errno
import warnings

import torch

import preduce
import preduce.torch
from preduce.torch import HEALTH_WINDOW
from test_torch import small_net

torch.set_num_threads(1)


def train(pr, net, opt, steps):
    """`steps` steps; the RuntimeWarnings preduce.torch gave."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        for _ in range(steps):
            opt.zero_grad()
            net(torch.randn(8, 4)).pow(2).mean().backward()
            pr.step()
    return [str(w.message) for w in got
            if issubclass(w.category, RuntimeWarning) and
            "preduce.torch" in str(w.message)]


def alone(cluster, monkeypatch, world):
    monkeypatch.setenv("PREDUCE_WORLD_SIZE", world)
    c = cluster(1, sched_sets=("scheduler.policy=dynamic",))
    net = small_net(seed=1)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    client = preduce.Client(c.sock[0], "w0")
    return client, net, opt, preduce.torch.PartialReduce(net, opt, client)


def test_groups_of_one_warn_once(cluster, monkeypatch):
    """A lone worker under dynamic averages with nobody: one warning once
    HEALTH_WINDOW averages were all groups of one, not before."""
    client, net, opt, pr = alone(cluster, monkeypatch, "4")
    with client:
        early = train(pr, net, opt, HEALTH_WINDOW - 1)
        later = train(pr, net, opt, HEALTH_WINDOW + 5)
    assert not [m for m in early if "groups of one" in m], early
    assert len([m for m in later if "groups of one" in m]) == 1, later
    assert pr.mean_group_size == 1.0


def test_a_world_of_one_does_not_warn(cluster, monkeypatch):
    client, net, opt, pr = alone(cluster, monkeypatch, "1")
    with client:
        assert train(pr, net, opt, HEALTH_WINDOW + 5) == []


def test_failing_averages_warn_once(cluster, monkeypatch):
    """Averages that fail with a retryable code (ETIMEDOUT injected into
    the client's reduce) for HEALTH_WINDOW steps in a row: one warning; a
    success in between starts the count again."""
    client, net, opt, pr = alone(cluster, monkeypatch, "1")
    real = client.reduce
    failing = [False]

    def reduce(*args, **kw):
        if failing[0]:
            raise preduce.PreduceError(errno.ETIMEDOUT, "injected")
        return real(*args, **kw)

    monkeypatch.setattr(client, "reduce", reduce)
    with client:
        train(pr, net, opt, 1)  # the first step learns the policy
        failing[0] = True
        first = train(pr, net, opt, HEALTH_WINDOW - 1)
        failing[0] = False
        train(pr, net, opt, 1)
        failing[0] = True
        second = train(pr, net, opt, HEALTH_WINDOW - 1)
        third = train(pr, net, opt, 5)
    assert first == [] and second == [], (first, second)
    assert len([m for m in third if "failed" in m]) == 1, third
    assert pr.failed >= 2 * HEALTH_WINDOW - 2
