# SPDX-License-Identifier: MIT
"""PyTorch integration: a model's parameters in preduce's shared memory.

    import preduce, preduce.torch
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    pr = preduce.torch.PartialReduce(model, opt)  # connects: Client()
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        pr.step()               # the average, then opt.step()

PartialReduce gives every parameter (and, with buffers=True, every
floating buffer) a place in one flat float32 tensor in the client's shared
memory. A float32 parameter on the CPU lives there: its .data becomes a
view of it, so the Parameter objects and the optimizer stay as they were,
and a reduce reads and writes the model where it lives, without a copy in
either direction. The others are copied (Dtypes, below).

What is averaged (docs/algorithm.md, section 11):
- average="gradients" (the default): before each optimizer step.
  - While the scheduler's policy is allreduce (every group is every
    worker), the gradients alone, as DistributedDataParallel does: in
    buckets of bucket_cap_mb, each started from autograd hooks as soon as
    backward has produced it, so the averages overlap backward; when
    backward() returns the gradients are the average (gradient clipping
    sees it). The first step also gives every replica rank 0's model, as
    DDP's broadcast does. no_sync() accumulates over micro-batches as
    DDP's does; without it each backward pass is averaged.
  - Under a policy of partial groups (dynamic, constant), a consensus
    step: one reduce of the members' models, optimizer state and
    gradients, so a group's members take one step from one point and
    leave it as one replica. The default finds the policy out from the
    scheduler's refusal of the buckets' tags, at the first step.
  - state=False: the gradients alone under every policy (replicas of
    partial groups drift apart); state=True: the consensus step under
    every policy.
- average="model" (P-Reduce's rule; the default when period > 1, overlap
  or outer_lr is set): after every `period`-th optimizer step the model
  is averaged with the group the scheduler forms (period > 1 is local
  SGD). With state=True the optimizer's state is averaged with it.

The state averaged is the optimizer's per-parameter state (Adam's and
AdamW's moments, SGD's momentum): it moves into shared memory beside the
parameters, as views the optimizer updates in place, bound again before
each reduce (after an optimizer load_state_dict()), moved out on close();
a bfloat16 or float16 parameter's state is copied instead, as the
parameter is.
Supported for torch.optim.Adam, AdamW (amsgrad too) and SGD (with
momentum, without dampening), with the parameters on the CPU; the step
counts stay local. Otherwise state=True raises TypeError (another
optimizer) or ValueError (SGD without momentum or with dampening,
parameters elsewhere), and the consensus step averages models and
gradients only.

Options of average="model":
- outer_lr (DiLoCo's outer optimizer): each worker keeps an anchor, the
  model as of its last average. After a group's average, the
  pseudo-gradient (anchor - average) goes to SGD with Nesterov momentum
  (outer_momentum), and the model and the anchor take the new anchor. A
  pseudo-gradient is always this worker's own since its last average
  (period steps old at most); how much a staler member's model counts in
  the average is the scheduler's weighting (scheduler.weighting =
  staleness), so no correction is applied here.
- overlap: the average of step t runs in the background while step t+1
  computes; at the next step the result is merged with the local progress
  made meanwhile (x += average - snapshot). The parameters then live in
  ordinary memory and are copied in once per average.

Dtypes: bfloat16 and float16 parameters (a model cast with
.to(torch.bfloat16), or mixed with float32 ones) keep their own memory and
dtype. Each has a float32 place in the flat tensor: before each reduce its
values are cast into it, and after a successful one the group's average,
computed in float32, is cast back into the parameter (and its gradient, in
gradients mode); a failed reduce leaves it as it was. Their optimizer
state, when it is averaged, is copied the same way, in the dtype the
optimizer keeps it in. float64 parameters are refused with a TypeError:
the sums are float32's, so cast the model (model.float()). Parameters that
are not on the CPU, and every parameter with overlap, are copied to and
from the flat tensor likewise. The client's wire encoding
(preduce.Client(wire="bf16")) is how floats travel between daemons; the
flat tensor and the sums stay float32. One exception: when the client's
wire is int8 (Client.wire: wire=, $PREDUCE_WIRE or the node's
transport.wire), the averaged state leaves out Adam's moments: they are
not sent, each worker keeps its own, and a consensus step's members share
model and gradients (and SGD's momentum, which int8 averages well). So
the workers of one job are all on int8 or none: their reduces' lengths
differ otherwise, and the scheduler keeps the layout most of the job's
live workers have, refusing the others with EINVAL (named with both
layouts; while turning to consensus steps a refusal is taken as the
switch's, up to HEALTH_WINDOW in a row, then raised).

A reduce that fails with a retryable code (a timeout, a lost peer) leaves
the model as it was and training goes on; `failed` counts them. Other
errors raise preduce.PreduceError.
"""

import collections
import contextlib
import errno
import os
import time
import warnings

import torch

import preduce
from preduce._buckets import GradBuckets, TagsRefused

__all__ = ["PartialReduce"]


# The dtypes of the tensors averaged; those other than float32 are cast
# to and from float32 places in the shared memory around each reduce.
DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# Steps (or averages) in a row that make PartialReduce warn that a
# worker's averages keep failing, or that it stays in groups of one; and
# the refusals in a row of a new consensus length it takes for a switch.
HEALTH_WINDOW = 20

# Why a consensus step's length may stay refused (raised with the error).
SWITCH_HINT = ("; the job's workers take consensus steps of different "
               "lengths: over an int8 wire (Client.wire, $PREDUCE_WIRE, "
               "transport.wire) Adam's moments are not averaged, so every "
               "worker of a job must be on int8 or none (docs/using.md)")


def _members(module, buffers):
    """The (owner, name, tensor) of each parameter (and floating buffer)."""
    out = []
    for mod in module.modules():
        for name, p in mod.named_parameters(recurse=False):
            out.append((mod, name, p))
        if buffers:
            for name, b in mod.named_buffers(recurse=False):
                if b is not None and b.is_floating_point():
                    out.append((mod, name, b))
    return out


def _state_names(optimizer):
    """The names of the optimizer's per-parameter state tensors that are
    averaged with the model (state=True); a TypeError or ValueError for
    an optimizer whose state is not understood here."""
    groups = optimizer.param_groups
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        names = ("exp_avg", "exp_avg_sq")
        if any(g.get("amsgrad") for g in groups):
            names += ("max_exp_avg_sq",)
        return names
    if isinstance(optimizer, torch.optim.SGD):
        if any(g.get("dampening", 0) for g in groups):
            raise ValueError("state=True: SGD with dampening starts its "
                             "momentum differently; use dampening=0")
        if not any(g.get("momentum", 0) for g in groups):
            raise ValueError("state=True: this SGD has no momentum, so no "
                             "state to average")
        return ("momentum_buffer",)
    raise TypeError(f"state=True: {type(optimizer).__name__}'s state is "
                    "not known to preduce.torch (Adam, AdamW and SGD are)")


class PartialReduce:
    """Averages a model's training with its group through a
    preduce.Client; use its step() in place of optimizer.step(). The
    module's docstring says what is averaged and when.

    Attributes for a training loop's logs: steps, reduces (successful
    averages), failed (averages that failed with a retryable code),
    mean_group_size, sync_seconds (time step() spent averaging),
    consensus (True once steps are consensus steps), last_result, and
    zero_copy (True when every parameter lives in the shared memory: all
    float32 on the CPU, without overlap).
    It warns once (RuntimeWarning) if the averages of HEALTH_WINDOW steps
    in a row fail, and once if that many averages in a row are groups of
    one (unless PREDUCE_WORLD_SIZE is 1): either way the worker is
    training alone."""

    def __init__(self, model, optimizer, client=None, *, period=1,
                 average=None, buffers=False, outer_lr=None,
                 outer_momentum=0.9, overlap=False, state=None,
                 bucket_cap_mb=25, timeout_ms=60000):
        if average is None:  # local steps between averages need models
            average = ("model" if int(period) > 1 or overlap or
                       outer_lr is not None else "gradients")
        if average not in ("model", "gradients"):
            raise ValueError("average is 'model' or 'gradients'")
        if int(period) < 1:
            raise ValueError("period must be at least 1")
        if state not in (None, True, False):
            raise ValueError("state is None (automatic), True or False")
        if average == "gradients" and (outer_lr is not None or overlap):
            raise ValueError("outer_lr and overlap apply to average='model'")
        if average == "gradients" and int(period) != 1:
            raise ValueError("average='gradients' averages every step's "
                             "gradients: period must be 1")
        if outer_lr is not None and overlap:
            raise ValueError("outer_lr and overlap together are not "
                             "supported: choose one")
        if state and (overlap or outer_lr is not None):
            raise ValueError("state averages the optimizer's state with "
                             "the model; it does not combine with overlap "
                             "or outer_lr")
        if client is None:  # $PREDUCE_SOCKET and the rank preduce-run set
            client = preduce.Client()
        self.model, self.optimizer, self.client = model, optimizer, client
        self.period, self.average = int(period), average
        self.outer_lr, self.outer_momentum = outer_lr, float(outer_momentum)
        self.overlap, self.timeout_ms = bool(overlap), int(timeout_ms)
        self.steps = 0      # optimizer steps taken
        self.reduces = 0    # averages that succeeded
        self.failed = 0     # averages that failed with a retryable code
        self.members = 0    # sum of the successful averages' group sizes
        self.last_result = None
        # Health, for one warning each (_check_health): steps in a row
        # whose averages failed, the last averages' group sizes.
        self._fail_streak = 0
        self._sizes = collections.deque(maxlen=HEALTH_WINDOW)
        self._warned = set()
        seen, self._tensors = set(), []
        for mod, name, t in _members(model, buffers):
            if id(t) in seen:  # shared (tied) parameters move once
                continue
            seen.add(id(t))
            if t.dtype not in DTYPES:
                raise TypeError(
                    f"{type(mod).__name__}.{name} is {t.dtype}: preduce "
                    "averages float32, bfloat16 and float16 tensors (its "
                    "sums are float32); cast the model (model.float())")
            self._tensors.append(t)
        if not self._tensors:
            raise ValueError("the model has no floating-point parameters")
        n = sum(t.numel() for t in self._tensors)
        self._shared_np = client.tensor(n)
        self.flat = torch.from_numpy(self._shared_np)  # the shared memory
        self._views = list(self._split(self.flat))
        # Which tensors live in the shared memory (.data a view of flat):
        # the float32 ones on the CPU, unless overlap keeps the model in
        # ordinary memory. The others are cast into their views before a
        # reduce and back after a successful one (_copy_in, _copy_out).
        self._resident = [not self.overlap and t.device.type == "cpu" and
                          t.dtype == torch.float32 for t in self._tensors]
        self.zero_copy = all(self._resident)
        with torch.no_grad():
            for t, v, home in zip(self._tensors, self._views,
                                  self._resident):
                v.copy_(t)
                if home:
                    t.data = v
        self._anchor = self.flat.clone() if outer_lr is not None else None
        self._momentum = (torch.zeros_like(self.flat)
                          if outer_lr is not None else None)
        # The optimizer state averaged (state=True, or None in gradients
        # mode once the groups turn out partial): one tensor per name. Its
        # views replace the optimizer's own tensors, so they must be where
        # the parameters are: on the CPU.
        self._state_names = ()
        on_cpu = all(t.device.type == "cpu" for t in self._tensors)
        if state and not on_cpu:
            raise ValueError("state=True needs the parameters on the CPU "
                             "(the optimizer's state would move there)")
        if state or (state is None and average == "gradients" and on_cpu):
            try:
                self._state_names = _state_names(optimizer)
            except (TypeError, ValueError):
                if state:
                    raise
        if client.wire == "int8" and self._state_names:
            # int8 rounds a block's small second moments to 0 (negative
            # with error feedback: NaN in AdamW's square root), and a
            # first moment rounded to its block's step beside a small
            # second moment is a step of many learning rates: Adam's
            # moments stay each worker's own, and are not sent at all.
            kept = tuple(s for s in self._state_names
                         if s not in self._MOMENTS)
            if state and kept != self._state_names:
                warnings.warn("state=True over an int8 wire: Adam's moments "
                              "stay each worker's own (docs/using.md)",
                              UserWarning, stacklevel=2)
            self._state_names = kept
        self._state = None
        self._state_views = []  # per parameter, {name: view}
        # gradients: DDP's buckets, averaged while backward runs, as long
        # as the groups are everyone (allreduce); a consensus step (one
        # reduce of models, state and gradients) with state=True, or with
        # state=None once the scheduler refused the buckets' tags.
        self.state = state
        self.consensus = False
        self._grad = self._buckets = None
        self._switching = False  # a consensus step's new length pending
        self._switch_refused = 0  # its refusals in a row
        if average == "gradients" and state:
            self._start_consensus()
        elif average == "gradients":
            if bucket_cap_mb is None or float(bucket_cap_mb) <= 0:
                cap = n  # one bucket: one reduce after backward
            else:
                cap = int(float(bucket_cap_mb) * (1 << 20)) // 4
            self._buckets = GradBuckets(client, self._tensors, cap,
                                        self.timeout_ms, self._attempt,
                                        fallback=state is False)
        elif state and self._state_names:
            self._alloc_state()
        self._sync_s = 0.0  # time step() spent averaging
        self._snapshot = None   # overlap: what the running reduce sent
        self._pending = None    # overlap: its ReduceHandle
        self.closed = False
        client._before_close(self.detach)

    @property
    def sync_seconds(self):
        """Time spent waiting for averages: in step(), and at the end of
        backward for the gradient buckets (what compute did not hide)."""
        b = self._buckets
        return self._sync_s + (b.wait_seconds if b is not None else 0.0)

    # -- the training loop's side --

    def zero_grad(self, set_to_none=False):
        """The optimizer's zero_grad()."""
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        """The optimizer's step, with the partial reduce that goes with it
        (before it for gradients, after every period-th for the model).
        Returns what optimizer.step() returned."""
        if self.closed:
            raise RuntimeError("PartialReduce: its client was closed "
                               "(the model is kept; make a new "
                               "PartialReduce with a new client)")
        failed = self.failed
        if self.average == "gradients":
            t0 = time.monotonic()
            self._average_gradients()
            self._sync_s += time.monotonic() - t0
            loss = self.optimizer.step(closure)
            self.steps += 1
            self._check_health(failed)
            return loss
        loss = self.optimizer.step(closure)
        self.steps += 1
        if self.overlap and self._pending is not None:
            self._merge()
        if self.steps % self.period == 0:
            t0 = time.monotonic()
            if self.overlap:
                self._start()
            else:
                self._reduce_model()
            self._sync_s += time.monotonic() - t0
        self._check_health(failed)
        return loss

    def _check_health(self, failed_before):
        """Warns once (RuntimeWarning) when this worker's averages keep
        failing or it keeps averaging alone: in both cases it trains on
        its own, which a loss curve shows only later."""
        self._fail_streak = (self._fail_streak + 1
                             if self.failed > failed_before else 0)
        if self._fail_streak >= HEALTH_WINDOW and "failed" not in \
                self._warned:
            self._warned.add("failed")
            warnings.warn(
                f"preduce.torch: the averages of the last {HEALTH_WINDOW} "
                f"steps failed ({self.failed} in all): this worker trains "
                "alone meanwhile; see its node daemon's log or "
                "`preducectl status`", RuntimeWarning, stacklevel=3)
        alone = (len(self._sizes) == HEALTH_WINDOW and
                 max(self._sizes) == 1 and
                 os.environ.get("PREDUCE_WORLD_SIZE") != "1")
        if alone and "alone" not in self._warned:
            self._warned.add("alone")
            warnings.warn(
                f"preduce.torch: the last {HEALTH_WINDOW} averages were "
                "groups of one: this worker trains alone (are the others "
                "running, in this job, and at a similar pace? "
                "scheduler.group_min and window_ms set how long a group "
                "waits)", RuntimeWarning, stacklevel=3)

    def _average_gradients(self):
        """Gradients mode, before the optimizer's step."""
        if self._buckets is not None:
            try:
                r = self._buckets.finish()
                if r is not None:
                    self._count(r)
                if self._buckets.need_sync:
                    # Like DDP's broadcast: every replica from rank 0's
                    # model, at the first step and after a failed bucket.
                    self._buckets.sync_params()
                return
            except TagsRefused:
                # The job's groups are partial: the members' models and
                # state must meet too, or the replicas drift apart.
                self._start_consensus()
                self._sync_s += self._buckets.wait_seconds
                self._buckets.close()
                self._buckets = None
        self._reduce_gradients()

    @torch.no_grad()
    def _start_consensus(self):
        self.consensus = True
        self._switching = self._buckets is not None
        n = self.flat.numel()
        self._grad = torch.from_numpy(self.client.tensor(n))
        if self._state_names:
            self._alloc_state()

    @contextlib.contextmanager
    def no_sync(self):
        """As DistributedDataParallel.no_sync(): backward passes inside
        only accumulate gradients; the next one outside (or step()) has
        the sum averaged. For gradient accumulation over micro-batches."""
        buckets = self._buckets
        if buckets is None:
            yield
            return
        buckets.sync = False
        try:
            yield
        finally:
            buckets.sync = True  # closed buckets' hooks are off anyway

    def finish(self):
        """Waits for a background average (overlap) and merges it."""
        if self._pending is not None:
            self._merge()

    @torch.no_grad()
    def detach(self):
        """Moves the parameters out of the shared memory into ordinary
        tensors (a copy): the model then outlives the client, whose
        close() calls this. No average follows; step() raises."""
        if self.closed:
            return
        if self._pending is not None and not self.client.closed:
            try:  # its result is dropped: nothing may stop the close
                self._pending.wait()
            except preduce.PreduceError:
                pass
            self._pending = None
        for t, home in zip(self._tensors, self._resident):
            if home:
                t.data = t.data.clone()
        for t, views in zip(self._tensors, self._state_views):
            st = self.optimizer.state.get(t, {})
            for name, view in views.items():
                if st.get(name) is view:
                    st[name] = view.clone()
        if self._buckets is not None:
            self._sync_s += self._buckets.wait_seconds
            self._buckets.close()
        self._state = self._grad = self._buckets = None
        self._state_views = []
        self.flat = self.flat.clone()
        self._views = list(self._split(self.flat))
        self._shared_np = None
        self.closed = True

    # -- the averages --

    def _attempt(self, call, *args):
        """call(*args), or None after a retryable PreduceError (counted in
        failed: the model stays as it was); other errors raise."""
        try:
            return call(*args)
        except preduce.PreduceError as e:
            if not e.retryable:
                raise
            self.failed += 1
            return None

    def _reduce(self, parts):
        """One blocking reduce of the shared tensors `parts` (one model):
        True on success."""
        try:
            r = self._attempt(self.client.reduce, parts, self.timeout_ms)
        except preduce.PreduceError as e:
            # Turning to consensus steps changes the reduce's length: the
            # job takes the new one once no worker holds the old one
            # (sched_work.c, check_layout), a step or so later.
            if not (self._switching and e.errno == errno.EINVAL and
                    "this job reduces" in str(e)):
                raise
            self._switch_refused += 1
            if self._switch_refused > HEALTH_WINDOW:
                # Not a switch any more: the job's workers disagree.
                raise preduce.PreduceError(e.errno,
                                           e.strerror + SWITCH_HINT)
            self.failed += 1
            return False
        self._switching = False
        self._switch_refused = 0
        if r is None:
            return False
        self._count(r)
        return True

    def _count(self, r):
        self.last_result = r
        self.reduces += 1
        self.members += len(r.members)
        self._sizes.append(len(r.members))

    @property
    def mean_group_size(self):
        """The mean size of the groups this worker averaged in (0.0 before
        the first): a worker whose groups stay small lags its peers."""
        return self.members / self.reduces if self.reduces else 0.0

    def _alloc_state(self):
        """One shared tensor per state name (each the model's size, so a
        model that fits node.max_tensor_mb has state that fits too)."""
        n = self.flat.numel()
        self._state = [torch.from_numpy(self.client.tensor(n))
                       for _ in self._state_names]
        self._bind_state()

    @torch.no_grad()
    def _bind_state(self):
        """Makes the optimizer's state tensors of each parameter views of
        the shared state (copying in what the optimizer had, or zeros
        where it had none yet: Adam's and SGD's first step then does what
        it would have done from nothing). Runs before each reduce, so a
        state the optimizer's load_state_dict() replaced is bound again."""
        if not self._state_views:
            chunks = self._state
            self._state_views = [
                dict(zip(self._state_names, views))
                for views in zip(*(self._split(c) for c in chunks))]
        owned = self._owned()
        for t, home, views in zip(self._tensors, self._resident,
                                  self._state_views):
            if id(t) not in owned:
                continue  # not optimized: its state stays zero
            if not home:  # copied in; _copy_out copies the average back
                st = self.optimizer.state.get(t, {})
                for name, view in views.items():
                    cur = st.get(name)
                    if isinstance(cur, torch.Tensor):
                        view.copy_(cur)
                    else:
                        view.zero_()
                continue
            st = self.optimizer.state[t]
            for name, view in views.items():
                cur = st.get(name)
                if cur is view:
                    continue
                if isinstance(cur, torch.Tensor):
                    view.copy_(cur)
                else:
                    view.zero_()
                st[name] = view
            if "exp_avg" in views and "step" not in st:
                st["step"] = torch.tensor(0.0)

    def _owned(self):
        """The ids of the tensors the optimizer steps."""
        return {id(p) for g in self.optimizer.param_groups
                for p in g["params"]}

    def _copies(self):
        """(tensor, its view in flat) of each tensor that does not live in
        the shared memory."""
        return [(t, v) for t, v, home in
                zip(self._tensors, self._views, self._resident) if not home]

    @torch.no_grad()
    def _copy_in(self):
        """Before a reduce: the values of the tensors that do not live in
        the shared memory into their views (cast to float32)."""
        for t, v in self._copies():
            v.copy_(t)

    @torch.no_grad()
    def _copy_out(self):
        """After a successful reduce: the averages into the tensors that
        do not live in the shared memory (cast to their dtype), and into
        their optimizer state (state averaged: _bind_state copied it in).
        A state the optimizer did not have yet is made in the parameter's
        dtype, as its own first step would have made it."""
        for t, v in self._copies():
            t.copy_(v)
        if self._state is None:
            return
        owned = self._owned()
        for t, home, views in zip(self._tensors, self._resident,
                                  self._state_views):
            if home or id(t) not in owned:
                continue
            st = self.optimizer.state[t]
            for name, view in views.items():
                cur = st.get(name)
                if isinstance(cur, torch.Tensor) and cur.shape == view.shape:
                    cur.copy_(view)
                else:
                    st[name] = view.to(t.dtype, copy=True)
            if "exp_avg" in views and "step" not in st:
                st["step"] = torch.tensor(0.0)

    # Optimizer state that is never negative (Adam's second moments).
    _NONNEGATIVE = ("exp_avg_sq", "max_exp_avg_sq")
    # Adam's moments, left out of the reduce over an int8 wire.
    _MOMENTS = ("exp_avg",) + _NONNEGATIVE

    def _reduce_parts(self):
        """One reduce of _parts(): True on success. A second moment
        that came back negative (a bf16 or fp32 sum's rounding) is taken
        as 0."""
        if not self._reduce(self._parts()):
            return False
        if self._state is not None:
            for s, name in zip(self._state, self._state_names):
                if name in self._NONNEGATIVE:
                    s.clamp_(min=0)
        return True

    def _parts(self):
        """The shared tensors one reduce averages, in order."""
        parts = [self.flat]
        if self._state is not None:
            self._bind_state()
            parts.extend(self._state)
        if self._grad is not None:
            parts.append(self._grad)
        return parts

    @torch.no_grad()
    def _reduce_model(self):
        self._copy_in()
        if not self._reduce_parts():
            return
        if self._anchor is not None and self._healed():
            # The group's model replaced ours: it is the new anchor, and
            # our stale momentum would push it back where we were.
            self._anchor.copy_(self.flat)
            self._momentum.zero_()
        elif self._anchor is not None:
            self._outer_step()
        self._copy_out()

    def _healed(self):
        """This worker took its group's model without giving its own
        (a healing join: weight 0 among others)."""
        r = self.last_result
        return r is not None and r.weight == 0.0 and len(r.members) > 1

    @torch.no_grad()
    def _outer_step(self):
        """DiLoCo's outer SGD with Nesterov momentum on the anchor."""
        delta = self._anchor - self.flat          # the pseudo-gradient
        self._momentum.mul_(self.outer_momentum).add_(delta)
        update = delta.add(self._momentum, alpha=self.outer_momentum)
        self._anchor.sub_(update, alpha=self.outer_lr)
        self.flat.copy_(self._anchor)

    @torch.no_grad()
    def _reduce_gradients(self):
        grads = list(self._split(self._grad))
        for t, g in zip(self._tensors, grads):
            if t.grad is None:
                g.zero_()
            else:
                g.copy_(t.grad)
        self._copy_in()
        if not self._reduce_parts():
            return  # each replica steps on its own gradients this time
        for t, g in zip(self._tensors, grads):
            if t.grad is not None:
                t.grad.copy_(g)
        self._copy_out()

    @torch.no_grad()
    def _start(self):
        self._copy_in()  # overlap: every tensor is a copy
        self._snapshot = self.flat.clone()
        self._pending = self._attempt(self.client.reduce_start, [self.flat],
                                      self.timeout_ms)

    @torch.no_grad()
    def _merge(self):
        """x += average - snapshot: the group's correction on top of the
        local progress made while the reduce ran."""
        handle, self._pending = self._pending, None
        r = self._attempt(handle.wait)
        if r is None:
            return
        self._count(r)
        correction = self.flat - self._snapshot
        for t, c in zip(self._tensors, self._split(correction)):
            t.add_(c)

    def _split(self, flat):
        off = 0
        for t in self._tensors:
            yield flat[off:off + t.numel()].view(t.shape)
            off += t.numel()

    # -- checkpoints --

    def state_dict(self):
        """What a checkpoint needs beside the model's and optimizer's."""
        return {"steps": self.steps, "reduces": self.reduces,
                "failed": self.failed, "members": self.members,
                "anchor": None if self._anchor is None
                else self._anchor.clone(),
                "momentum": None if self._momentum is None
                else self._momentum.clone()}

    def load_state_dict(self, state):
        """Restores state_dict()'s values (after the model's own)."""
        self.steps = int(state["steps"])
        self.reduces = int(state.get("reduces", 0))
        self.failed = int(state.get("failed", 0))
        self.members = int(state.get("members", 0))
        if self._anchor is not None and state.get("anchor") is not None:
            self._anchor.copy_(state["anchor"])
            self._momentum.copy_(state["momentum"])
