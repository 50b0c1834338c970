# SPDX-License-Identifier: MIT
"""A Python trainer for tests/integration/test_python.c: reduces `steps`
times through the ctypes binding (client/python/preduce/) and checks each
result against a double-precision reference of the members it reports.

    py_worker.py SOCKET NAME NFLOATS STEPS [JOIN_K [in-place]]
                                      exit 0 when every result held

With JOIN_K, the STEPS start once a group of JOIN_K members came back (every
worker of the job had joined); the reduces before are checked too.
"""

import sys

import numpy as np

import preduce


def inputs(rank, version, n):
    i = np.arange(n, dtype=np.uint64)
    x = (np.uint64(rank) * np.uint64(7919) + np.uint64(version) *
         np.uint64(104729) + i * np.uint64(31)) % np.uint64(1000)
    return (1.0 + x.astype(np.float32) / np.float32(1000.0)).astype(np.float32)


def main():
    sock, name, n, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
        int(sys.argv[4])
    with preduce.Client(sock, name) as c:
        join_k = int(sys.argv[5]) if len(sys.argv) > 5 else 0
        if sys.argv[6:] == ["in-place"]:
            c.set_in_place()
        w = c.tensor(n)
        rank, version = c.rank, 0
        step, joined = 0, join_k == 0
        while step < steps:
            w[:] = inputs(rank, version + 1, n)  # in place: shared memory
            r = c.reduce([w], timeout_ms=20000)
            ref = np.zeros(n)
            for mrank, mver, weight in r.members:
                ref += weight * inputs(mrank, mver, n).astype(np.float64)
            err = np.max(np.abs(w.astype(np.float64) - ref) / np.abs(ref))
            if err > 1e-6 or abs(sum(m[2] for m in r.members) - 1) > 1e-9:
                print(f"{name}: step {step}: relative error {err:.3g}",
                      file=sys.stderr)
                return 1
            version = r.version
            step += joined
            joined = joined or len(r.members) >= join_k
        # A bad call raises PreduceError with the errno and the text.
        try:
            c.reduce([np.zeros(3, dtype=np.float32)])
            print(f"{name}: a foreign array was accepted", file=sys.stderr)
            return 1
        except preduce.PreduceError as e:
            if e.errno != 22:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
