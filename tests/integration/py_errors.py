# SPDX-License-Identifier: MIT
"""A Python trainer for tests/integration/test_python.c, alone in a job
that needs two workers: its reduce times out, and the binding says which
errors are worth a retry (PreduceError.retryable, from the library's
preduce_error_retryable).

    py_errors.py SOCKET NAME        exit 0 when every check held
"""

import errno
import sys

import numpy as np

import preduce


def main():
    sock, name = sys.argv[1], sys.argv[2]
    with preduce.Client(sock, name) as c:
        w = c.tensor(16)
        try:
            c.reduce([w], timeout_ms=300)
            print(f"{name}: a reduce with no group possible succeeded",
                  file=sys.stderr)
            return 1
        except preduce.PreduceError as e:
            if e.errno != errno.ETIMEDOUT or e.retryable is not True:
                print(f"{name}: {e!r} retryable={e.retryable!r}",
                      file=sys.stderr)
                return 2
        try:
            c.reduce([np.zeros(3, dtype=np.float32)])
            return 3
        except preduce.PreduceError as e:
            if e.errno != errno.EINVAL or e.retryable is not False:
                print(f"{name}: {e!r} retryable={e.retryable!r}",
                      file=sys.stderr)
                return 4
        # The rest of the table, as the library sees it.
        want = {errno.ETIMEDOUT: True, errno.ECONNRESET: True,
                errno.ENOTCONN: False, errno.EINVAL: False,
                errno.EBUSY: False, errno.ENOMEM: False}
        for err, retry in want.items():
            if preduce.PreduceError(err, "").retryable is not retry:
                print(f"{name}: errno {err}: retryable is not {retry}",
                      file=sys.stderr)
                return 5
    return 0


if __name__ == "__main__":
    sys.exit(main())
