# SPDX-License-Identifier: MIT
"""preduce for Python trainers: a ctypes binding of libpreduce.

The tensors are numpy arrays over the shared memory the daemon reads and
writes, so a model's parameters can live in them with no copy:

    import preduce
    with preduce.Client("/run/preduce/preduced.sock", "worker-0") as c:
        w = c.tensor(1000)          # numpy float32 array, zero-filled
        for step in range(100):
            w -= 0.1 * grad(w)      # in place: w stays the shared memory
            r = c.reduce([w])       # w now holds the group's average
            print(r.group, r.members, r.version)

``preduce.torch`` puts a PyTorch model's parameters into such memory (the
parameters become views of it) and reduces them after the optimizer step.

A reduce can also run in the background: ``h = c.reduce_start([w])``, then
``h.done()`` polls and ``h.wait(timeout_ms)`` returns its Result; the
arrays must not be touched until it ended. torch tensors made over a
client's array (``torch.from_numpy(w)``, or any tensor whose memory is that
array's) are accepted wherever the array is.

Errors raise PreduceError (an OSError: .errno is positive, the text the
library's, with the daemon's reason when it gave one); its .retryable says
whether the call may succeed if made again (a reduce that timed out or
lost a peer: preduce_error_retryable() in preduce.h). Nothing here prints
or exits. The library is found as $PREDUCE_LIB, else the copy an install
bundled beside this package, else libpreduce.so.1 on the loader's path;
without one, importing preduce raises ImportError saying how to get it.

``Client()`` with no arguments takes its socket and name from the
environment preduce-run sets: PREDUCE_SOCKET (else the service's
/run/preduce/preduced.sock) and PREDUCE_NAME (else "rank" + PREDUCE_RANK,
else host and process id).
"""

import ctypes
import errno as _errno
import os
import socket as _socket
import weakref

import numpy as np

__all__ = ["Client", "PreduceError", "ReduceHandle", "Result", "retryable"]

# The release, as preduce.h's PREDUCE_VERSION_MAJOR.MINOR (check-ops
# compares them).
__version__ = "0.3"

SOCKET = "/run/preduce/preduced.sock"  # node.socket's default
_BUNDLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib",
                        "libpreduce.so.1")


def _open_library():
    """The libpreduce to use: $PREDUCE_LIB, the bundled copy, the loader's."""
    path = os.environ.get("PREDUCE_LIB")
    if path:
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            raise ImportError(f"preduce: PREDUCE_LIB={path} cannot be "
                              f"loaded ({e}); point it at a built "
                              "libpreduce.so.1 or unset it") from e
    errors = []
    for path in (_BUNDLED, "libpreduce.so.1"):
        if path == _BUNDLED and not os.path.exists(path):
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
    raise ImportError(
        "preduce: libpreduce.so.1 was not found (" + "; ".join(errors) +
        "). Install it (apt install libpreduce1, or `make install` as root, "
        "which runs ldconfig), install this package with `pip install .` "
        "from a built tree (it bundles build/libpreduce.so.1), or set "
        "PREDUCE_LIB to the library's path")


def _load():
    lib = _open_library()
    c_void_pp = ctypes.POINTER(ctypes.c_void_p)
    sigs = {
        "preduce_connect": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p,
                                           ctypes.c_int, c_void_pp]),
        "preduce_close": (ctypes.c_int, [ctypes.c_void_p]),
        "preduce_rank": (ctypes.c_int, [ctypes.c_void_p]),
        "preduce_fd": (ctypes.c_int, [ctypes.c_void_p]),
        "preduce_tensor_create": (ctypes.c_int, [ctypes.c_void_p,
                                                 ctypes.c_size_t, ctypes.c_int,
                                                 c_void_pp]),
        "preduce_tensor_data": (ctypes.POINTER(ctypes.c_float),
                                [ctypes.c_void_p]),
        "preduce_tensor_len": (ctypes.c_size_t, [ctypes.c_void_p]),
        "preduce_tensor_destroy": (ctypes.c_int, [ctypes.c_void_p]),
        "preduce_reduce": (ctypes.c_int, [ctypes.c_void_p, c_void_pp,
                                          ctypes.c_size_t, ctypes.c_int]),
        "preduce_reduce_start": (ctypes.c_int, [ctypes.c_void_p, c_void_pp,
                                                ctypes.c_size_t,
                                                ctypes.c_int]),
        "preduce_reduce_wait": (ctypes.c_int, [ctypes.c_void_p,
                                               ctypes.c_int]),
        "preduce_set_in_place": (ctypes.c_int, [ctypes.c_void_p,
                                                ctypes.c_int]),
        "preduce_set_heal": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
        "preduce_set_tag": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint32]),
        "preduce_last_result": (ctypes.c_void_p, [ctypes.c_void_p]),
        "preduce_result_group": (ctypes.c_uint64, [ctypes.c_void_p]),
        "preduce_result_size": (ctypes.c_size_t, [ctypes.c_void_p]),
        "preduce_result_member": (ctypes.c_int, [
            ctypes.c_void_p, ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64),
            ctypes.POINTER(ctypes.c_double)]),
        "preduce_result_weight": (ctypes.c_double, [ctypes.c_void_p]),
        "preduce_result_version": (ctypes.c_uint64, [ctypes.c_void_p]),
        "preduce_result_wire": (ctypes.c_char_p, [ctypes.c_void_p]),
        "preduce_wire": (ctypes.c_char_p, [ctypes.c_void_p]),
        "preduce_strerror": (ctypes.c_char_p, [ctypes.c_int]),
        "preduce_error_retryable": (ctypes.c_int, [ctypes.c_int]),
        "preduce_last_error": (ctypes.c_char_p, [ctypes.c_void_p]),
        "preduce_options_create": (ctypes.c_int, [c_void_pp]),
        "preduce_options_set": (ctypes.c_int, [ctypes.c_void_p,
                                               ctypes.c_char_p,
                                               ctypes.c_char_p]),
        "preduce_options_destroy": (None, [ctypes.c_void_p]),
        "preduce_connect_with": (ctypes.c_int, [ctypes.c_char_p,
                                                ctypes.c_char_p,
                                                ctypes.c_void_p, ctypes.c_int,
                                                c_void_pp]),
        "preduce_job": (ctypes.c_char_p, [ctypes.c_void_p]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    return lib


_lib = _load()


def _l():
    return _lib


def retryable(err):
    """True when a call that failed with errno `err` (positive, as in
    PreduceError.errno) may succeed if made again: ETIMEDOUT, ECONNRESET."""
    return bool(err and _l().preduce_error_retryable(-abs(int(err))))


class PreduceError(OSError):
    """A libpreduce call failed: .errno is positive, the text the library's.

    A reduce fails with one of a few codes (docs/operations.md, "Failure behaviour"):
    ETIMEDOUT and ECONNRESET are worth a retry (.retryable is True);
    ENOTCONN asks for a new Client; EINVAL, EBUSY and ENOMEM are the
    caller's to fix.
    """

    @property
    def retryable(self):
        """True when the same call may succeed if made again."""
        return retryable(self.errno)


def _check(rc, client=None):
    """Raises PreduceError for rc < 0, with the daemon's reason if it gave
    one on `client` (a refused reduce or tensor); returns rc otherwise."""
    if rc < 0:
        text = _l().preduce_strerror(rc).decode()
        why = _l().preduce_last_error(client).decode() if client else ""
        raise PreduceError(-rc, f"{text}: {why}" if why else text)
    return rc


def default_name():
    """The worker name Client() uses when given none (see Client)."""
    name = os.environ.get("PREDUCE_NAME")
    if name:
        return name
    rank = os.environ.get("PREDUCE_RANK")
    if rank:
        return f"rank{rank}"
    return f"{_socket.gethostname()}-{os.getpid()}"


def _connect_text(rc, path):
    """A failed connect's message: the library's text, the socket and,
    for the usual causes, what to do."""
    text = f"{_l().preduce_strerror(rc).decode()} (socket {path})"
    why = _l().preduce_last_error(None).decode(errors="replace")
    if why and why != _l().preduce_strerror(rc).decode():
        text += f": {why}"
    elif -rc in (_errno.ENOENT, _errno.ECONNREFUSED):
        text += (": no node daemon listens there; start the service "
                 "(systemctl start preduced), run under preduce-run, or "
                 "set PREDUCE_SOCKET to node.socket")
    elif -rc in (_errno.ENOTCONN, _errno.ETIMEDOUT):
        text += (": the node daemon did not register this worker; the "
                 "usual cause is that the node has no link to its "
                 "scheduler (node.scheduler in its config; its log says "
                 "why)")
    elif -rc == _errno.EACCES:
        text += (": no permission; join node.socket_group (the preduce "
                 "group) or ask the administrator")
    return text


# The wire encodings a trainer may ask for (transport.wire in
# preduced.conf(5); the names the library's "wire" option takes).
WIRES = ("fp32", "bf16", "int8")


def _check_wire(wire):
    """Raises ValueError unless wire is None or one of WIRES."""
    if wire is not None and wire not in WIRES:
        raise ValueError(f"wire {wire!r}: one of " +
                         ", ".join(repr(w) for w in WIRES) +
                         " (None: $PREDUCE_WIRE, else the node's "
                         "transport.wire)")


def _options(job, settings, wire=None, job_key=None, scheduler=None):
    """libpreduce's connect options for job, settings, wire, job_key and
    scheduler (None: none, so the environment's apply); raises ValueError
    naming a bad one."""
    if job is None and settings is None and wire is None and \
            job_key is None and scheduler is None:
        return None
    opts = ctypes.c_void_p()
    if _l().preduce_options_create(ctypes.byref(opts)) < 0:
        raise MemoryError("preduce_options_create")
    if isinstance(settings, dict):
        settings = [f"{k}={v}" for k, v in settings.items()]
    pairs = [] if job is None else [("job", str(job))]
    pairs += [("setting", str(s)) for s in settings or ()]
    pairs += [] if wire is None else [("wire", wire)]
    pairs += [] if job_key is None else [("job_key", os.fsdecode(job_key))]
    pairs += [] if scheduler is None else [("scheduler", str(scheduler))]
    why = {"job": "a job name has 1..63 printable characters, no spaces "
                  "or quotes",
           "setting": "a setting is key=value, at most 127 bytes, at "
                      "most 16 of them",
           # wire was checked against WIRES: the library is older.
           "wire": "this libpreduce does not know the wire option; "
                   "update it (or leave wire=None)",
           "job_key": "a key file's path of 1..1023 bytes (or this "
                      "libpreduce is older than job keys)",
           "scheduler": "a scheduler is host:port or a list of them, "
                        "1..1023 printable bytes (or this libpreduce is "
                        "older than job schedulers)"}
    for key, value in pairs:
        rc = _l().preduce_options_set(opts, key.encode(), value.encode())
        if rc < 0:
            _l().preduce_options_destroy(opts)
            raise ValueError(f"{key} {value!r}: {why[key]}")
    return opts


class Result:
    """The outcome of a reduce: group id, members (rank, version, weight),
    this worker's weight, its version after the reduce, and the encoding
    the group's floats travelled in between daemons (wire: "fp32",
    "bf16", "int8", or None when the daemon did not say)."""

    def __init__(self, r):
        lib = _l()
        self.group = lib.preduce_result_group(r)
        self.weight = lib.preduce_result_weight(r)
        self.version = lib.preduce_result_version(r)
        self.wire = lib.preduce_result_wire(r).decode() or None
        self.members = []
        for i in range(lib.preduce_result_size(r)):
            rank, ver, w = ctypes.c_uint32(), ctypes.c_uint64(), \
                ctypes.c_double()
            _check(lib.preduce_result_member(r, i, ctypes.byref(rank),
                                             ctypes.byref(ver),
                                             ctypes.byref(w)))
            self.members.append((rank.value, ver.value, w.value))

    def __repr__(self):
        return (f"Result(group={self.group}, version={self.version}, "
                f"weight={self.weight:.4g}, members={self.members}, "
                f"wire={self.wire!r})")


class ReduceHandle:
    """A reduce running in the background (Client.reduce_start).

    The arrays it reduces must not be read or written until done() is True
    or wait() returned (or raised).
    """

    def __init__(self, client):
        self._client = client
        self._result = None
        self._error = None

    def _finish(self, rc):
        if rc == -_errno.EAGAIN:
            return False
        self._client._inflight = None
        try:
            _check(rc, self._client._c)
            self._result = Result(_l().preduce_last_result(self._client._c))
        except PreduceError as e:
            self._error = e
        return True

    def done(self):
        """True once the reduce has ended, successfully or not (polls)."""
        if self._result is not None or self._error is not None:
            return True
        return self._finish(_l().preduce_reduce_wait(self._client._c, 0))

    def wait(self, timeout_ms=None):
        """Waits up to timeout_ms (None: until the reduce's own deadline)
        and returns the Result; raises PreduceError if the reduce failed,
        or TimeoutError if timeout_ms passed first (it still runs)."""
        if not self.done():
            left = -1 if timeout_ms is None else int(timeout_ms)
            if left < 0:
                left = 2 ** 31 - 1  # the reduce's deadline ends it first
            if not self._finish(_l().preduce_reduce_wait(self._client._c,
                                                         left)):
                raise TimeoutError("the reduce has not finished yet")
        if self._error is not None:
            raise self._error
        return self._result


class Client:
    """A connection to the node daemon as one worker."""

    def __init__(self, socket_path=None, name=None, timeout_ms=5000, *,
                 job=None, settings=None, wire=None, job_key=None,
                 scheduler=None):
        """Connects to the node daemon at socket_path as worker `name`.

        Either may be None: socket_path is then $PREDUCE_SOCKET or the
        service's socket, name $PREDUCE_NAME, "rank" + $PREDUCE_RANK, or
        host-pid. `job` names the job to join ($PREDUCE_JOB, else the
        daemon's job); `settings` ({"policy": "allreduce"} or
        ["policy=allreduce"]) are the job's scheduler settings, used when
        this worker starts it ($PREDUCE_POLICY, $PREDUCE_JOB_SETTINGS).
        `wire` is the encoding this worker asks its reduces' floats to
        travel in between daemons: "fp32" (exact), "bf16" (half the
        bytes, rounded to 8 significant bits) or "int8" (a little over a
        quarter: blocks of 256 floats sharing a scale, what rounding lost
        carried into the next reduce); None takes $PREDUCE_WIRE, else the
        node's transport.wire. A group travels in the most precise
        encoding its members asked for; sums and the arrays stay float32,
        and every member gets the same result (docs/algorithm.md, 8.9).
        `job_key` is the path of the job's key file ($PREDUCE_JOB_KEY):
        a job started with a key admits only workers with the same key
        (docs/operations.md, "Job keys"); the file must be 16 to 4096 bytes
        that only its owner may read (mode 600). `scheduler` is the job's
        own scheduler, "host:port" or standbys "a,b" ($PREDUCE_SCHEDULER,
        else the daemon's node.scheduler): the daemon follows it beside
        its own, so that this job's groups and failures stay its own.
        Raises ValueError for a bad job, setting, wire, key path or
        scheduler before
        connecting; PreduceError naming the socket when the daemon cannot
        be reached, with the reason when the key file cannot be used, and
        with the scheduler's reason when it refuses the job, its settings
        or its key (errno EACCES)."""
        _check_wire(wire)
        if socket_path is None:
            socket_path = os.environ.get("PREDUCE_SOCKET") or SOCKET
        if name is None:
            name = default_name()
        self._c = ctypes.c_void_p()
        self._tensors = {}  # data address -> (handle, array)
        self._inflight = None
        self._on_close = []  # weak callbacks run before the memory goes
        self.socket_path, self.name = str(socket_path), str(name)
        opts = _options(job, settings, wire, job_key, scheduler)
        try:
            rc = _l().preduce_connect_with(self.socket_path.encode(),
                                           self.name.encode(), opts,
                                           int(timeout_ms),
                                           ctypes.byref(self._c))
        finally:
            _l().preduce_options_destroy(opts)
        if rc < 0:
            raise PreduceError(-rc, _connect_text(rc, self.socket_path))

    @property
    def wire(self):
        """The encoding this worker's reduces ask for: wire=, else
        $PREDUCE_WIRE, else the node's transport.wire (None when the
        daemon did not say: one older than this library). A group may
        travel in a more precise one (Result.wire)."""
        return _l().preduce_wire(self._c).decode() or None

    @property
    def job(self):
        """The job this worker joined, as its daemon named it."""
        return _l().preduce_job(self._c).decode()

    @property
    def rank(self):
        """This worker's rank in the job."""
        return _check(_l().preduce_rank(self._c))

    def fileno(self):
        """A descriptor that is readable when a background reduce may
        have something to report (for select/poll loops)."""
        return _check(_l().preduce_fd(self._c))

    def tensor(self, n, timeout_ms=5000):
        """A float32 numpy array of n elements in shared memory."""
        t = ctypes.c_void_p()
        _check(_l().preduce_tensor_create(self._c, int(n), int(timeout_ms),
                                          ctypes.byref(t)), self._c)
        ptr = _l().preduce_tensor_data(t)
        arr = np.ctypeslib.as_array(ptr, shape=(int(n),))
        self._tensors[arr.ctypes.data] = (t, arr)
        return arr

    def _handles(self, arrays):
        handles = []
        for a in arrays:
            if hasattr(a, "data_ptr"):  # a torch tensor, not imported here
                addr, n = a.data_ptr(), a.numel()
            else:
                addr, n = np.asarray(a).ctypes.data, np.asarray(a).size
            entry = self._tensors.get(addr)
            if entry is None or entry[1].size != n:
                raise PreduceError(_errno.EINVAL,
                                   "not a whole tensor of this client "
                                   "(use the array Client.tensor returned, "
                                   "or a torch tensor over all of it)")
            handles.append(entry[0])
        return (ctypes.c_void_p * len(handles))(*handles)

    def reduce(self, arrays, timeout_ms=60000):
        """Averages the arrays (one model) with this step's group; they
        hold the result when it returns."""
        arr = self._handles(arrays)
        _check(_l().preduce_reduce(self._c, arr, len(arr), int(timeout_ms)),
               self._c)
        return Result(_l().preduce_last_result(self._c))

    def reduce_start(self, arrays, timeout_ms=60000):
        """Starts the same reduce in the background: a ReduceHandle."""
        arr = self._handles(arrays)
        _check(_l().preduce_reduce_start(self._c, arr, len(arr),
                                         int(timeout_ms)), self._c)
        self._inflight = ReduceHandle(self)
        return self._inflight

    def set_in_place(self, on=True):
        """Results written into the arrays as they arrive (one pass less
        each reduce); on error an element may then hold its result rather
        than its input (preduce_set_in_place)."""
        _check(_l().preduce_set_in_place(self._c, 1 if on else 0))

    def set_tag(self, tag):
        """The next reduces carry `tag` (0: none): groups form only of
        reduces with the same tag, so parts of a model reduced one after
        another are never averaged with a peer's other part. Needs the
        allreduce policy; under another a tagged reduce raises EINVAL
        (preduce_set_tag)."""
        if not 0 <= int(tag) < 2 ** 32:
            raise ValueError("a tag is a 32-bit unsigned integer")
        _check(_l().preduce_set_tag(self._c, int(tag)))

    def set_heal(self, on=True):
        """The next reduces, until one succeeds, take the group's model and
        give none of this worker's (weight 0): after a restart from an
        older checkpoint (preduce_set_heal). A fresh model joining a job
        that has gone past it heals without asking."""
        _check(_l().preduce_set_heal(self._c, 1 if on else 0))

    @property
    def closed(self):
        """True once close() ran."""
        return not self._c

    def _before_close(self, method):
        """Calls method (held weakly) before close() unmaps the tensors:
        preduce.torch moves a model's parameters out of them then."""
        self._on_close.append(weakref.WeakMethod(method))

    def close(self):
        """Ends the connection. The arrays Client.tensor() returned are
        unmapped and must not be used afterwards; a preduce.torch model
        keeps working (its parameters move to ordinary memory first)."""
        if self._c:
            try:
                for ref in self._on_close:
                    fn = ref()
                    if fn is not None:
                        fn()
            finally:  # the connection and its memory go whatever happened
                self._on_close.clear()
                self._tensors.clear()
                _l().preduce_close(self._c)
                self._c = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
