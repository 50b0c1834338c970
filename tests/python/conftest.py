# SPDX-License-Identifier: MIT
"""pytest fixtures for the Python package's tests: real preduced daemons
(tests/python/cluster.py), stopped (their logs shown on failure) when the
test ends. The library comes from $PREDUCE_LIB or build/."""

import os

import pytest

from cluster import TOP, Cluster

os.environ.setdefault("PREDUCE_LIB",
                      os.path.join(TOP, "build", "libpreduce.so.1"))


@pytest.fixture
def cluster(tmp_path):
    """cluster(nodes, sched_sets=(...), node_sets=(...), name="") ->
    Cluster; a name gives it a directory of its own (a second one)."""
    made = []

    def make(nodes=2, sched_sets=("scheduler.policy=allreduce",),
             node_sets=(), name=""):
        where = tmp_path / name if name else tmp_path
        where.mkdir(exist_ok=True)
        c = Cluster(where, nodes, sched_sets, node_sets)
        made.append(c)
        return c

    yield make
    for c in made:
        bad = c.stop()
        for who in bad:
            print(f"--- {who}.log ---\n{c.log(who)}")
        assert not bad, f"daemons that did not exit cleanly: {bad}"
