"""preduce for Python trainers: a thin ctypes binding of libpreduce.

The tensors are numpy arrays over the shared memory the daemon reads and
writes, so a model's parameters can live in them with no copy:

    import preduce
    with preduce.Client("/run/preduce/preduced.sock", "worker-0") as c:
        w = c.tensor(1000)          # numpy float32 array, zero-filled
        for step in range(100):
            w -= 0.1 * grad(w)      # in place: w stays the shared memory
            r = c.reduce([w])       # w now holds the group's average
            print(r.group, r.members, r.version)

Errors raise PreduceError(errno, message); its .retryable says whether the
call may succeed if made again (a reduce that timed out or lost a peer:
preduce_error_retryable() in preduce.h). Nothing here prints or exits.
The library is found as $PREDUCE_LIB, else libpreduce.so.1 on the loader's
path.
"""

import ctypes
import errno as _errno
import os

import numpy as np

__all__ = ["Client", "PreduceError", "Result"]


def _load():
    path = os.environ.get("PREDUCE_LIB", "libpreduce.so.1")
    lib = ctypes.CDLL(path)
    c_void_pp = ctypes.POINTER(ctypes.c_void_p)
    sigs = {
        "preduce_connect": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p,
                                           ctypes.c_int, c_void_pp]),
        "preduce_close": (ctypes.c_int, [ctypes.c_void_p]),
        "preduce_rank": (ctypes.c_int, [ctypes.c_void_p]),
        "preduce_tensor_create": (ctypes.c_int, [ctypes.c_void_p,
                                                 ctypes.c_size_t, ctypes.c_int,
                                                 c_void_pp]),
        "preduce_tensor_data": (ctypes.POINTER(ctypes.c_float),
                                [ctypes.c_void_p]),
        "preduce_tensor_len": (ctypes.c_size_t, [ctypes.c_void_p]),
        "preduce_tensor_destroy": (ctypes.c_int, [ctypes.c_void_p]),
        "preduce_reduce": (ctypes.c_int, [ctypes.c_void_p, c_void_pp,
                                          ctypes.c_size_t, ctypes.c_int]),
        "preduce_set_in_place": (ctypes.c_int, [ctypes.c_void_p,
                                                ctypes.c_int]),
        "preduce_last_result": (ctypes.c_void_p, [ctypes.c_void_p]),
        "preduce_result_group": (ctypes.c_uint64, [ctypes.c_void_p]),
        "preduce_result_size": (ctypes.c_size_t, [ctypes.c_void_p]),
        "preduce_result_member": (ctypes.c_int, [
            ctypes.c_void_p, ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64),
            ctypes.POINTER(ctypes.c_double)]),
        "preduce_result_weight": (ctypes.c_double, [ctypes.c_void_p]),
        "preduce_result_version": (ctypes.c_uint64, [ctypes.c_void_p]),
        "preduce_strerror": (ctypes.c_char_p, [ctypes.c_int]),
        "preduce_error_retryable": (ctypes.c_int, [ctypes.c_int]),
        "preduce_last_error": (ctypes.c_char_p, [ctypes.c_void_p]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    return lib


_lib = None


def _l():
    global _lib
    if _lib is None:
        _lib = _load()
    return _lib


class PreduceError(OSError):
    """A libpreduce call failed: .errno is positive, the text the library's.

    A reduce fails with one of a few codes (README, "Failure behaviour"):
    ETIMEDOUT and ECONNRESET are worth a retry (.retryable is True);
    ENOTCONN asks for a new Client; EINVAL, EBUSY and ENOMEM are the
    caller's to fix.
    """

    @property
    def retryable(self):
        """True when the same call may succeed if made again."""
        return bool(self.errno and
                    _l().preduce_error_retryable(-self.errno))


def _check(rc, client=None):
    """Raises PreduceError for rc < 0, with the daemon's reason if it gave
    one on `client` (a refused reduce or tensor); returns rc otherwise."""
    if rc < 0:
        text = _l().preduce_strerror(rc).decode()
        why = _l().preduce_last_error(client).decode() if client else ""
        raise PreduceError(-rc, f"{text}: {why}" if why else text)
    return rc


class Result:
    """The outcome of a reduce: group id, members (rank, version, weight),
    this worker's weight and its version after the reduce."""

    def __init__(self, r):
        lib = _l()
        self.group = lib.preduce_result_group(r)
        self.weight = lib.preduce_result_weight(r)
        self.version = lib.preduce_result_version(r)
        self.members = []
        for i in range(lib.preduce_result_size(r)):
            rank, ver, w = ctypes.c_uint32(), ctypes.c_uint64(), \
                ctypes.c_double()
            _check(lib.preduce_result_member(r, i, ctypes.byref(rank),
                                             ctypes.byref(ver),
                                             ctypes.byref(w)))
            self.members.append((rank.value, ver.value, w.value))


class Client:
    """A connection to the node daemon as one worker."""

    def __init__(self, socket_path, name, timeout_ms=5000):
        self._c = ctypes.c_void_p()
        self._tensors = {}  # id(array) -> handle, keeps them alive
        _check(_l().preduce_connect(socket_path.encode(), name.encode(),
                                    int(timeout_ms), ctypes.byref(self._c)))

    @property
    def rank(self):
        return _check(_l().preduce_rank(self._c))

    def tensor(self, n, timeout_ms=5000):
        """A float32 numpy array of n elements in shared memory."""
        t = ctypes.c_void_p()
        _check(_l().preduce_tensor_create(self._c, int(n), int(timeout_ms),
                                          ctypes.byref(t)), self._c)
        ptr = _l().preduce_tensor_data(t)
        arr = np.ctypeslib.as_array(ptr, shape=(int(n),))
        self._tensors[id(arr)] = (t, arr)
        return arr

    def reduce(self, arrays, timeout_ms=60000):
        """Averages the arrays (one model) with this step's group."""
        handles = []
        for a in arrays:
            entry = self._tensors.get(id(a))
            if entry is None:
                raise PreduceError(_errno.EINVAL,
                                   "not a tensor of this client "
                                   "(use the array Client.tensor returned)")
            handles.append(entry[0])
        arr = (ctypes.c_void_p * len(handles))(*handles)
        _check(_l().preduce_reduce(self._c, arr, len(handles),
                                   int(timeout_ms)), self._c)
        return Result(_l().preduce_last_result(self._c))

    def set_in_place(self, on=True):
        """Results written into the arrays as they arrive (one pass less
        each reduce); on error an element may then hold its result rather
        than its input (preduce_set_in_place)."""
        _check(_l().preduce_set_in_place(self._c, 1 if on else 0))

    def close(self):
        if self._c:
            self._tensors.clear()
            _l().preduce_close(self._c)
            self._c = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
