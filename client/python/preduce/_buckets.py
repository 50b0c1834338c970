# SPDX-License-Identifier: MIT
"""Gradients averaged in buckets while backward runs, as
DistributedDataParallel's reducer does (preduce.torch, average="gradients").

The gradients are laid out in the reverse order of the parameters (the
order backward produces them) and cut into K buckets of equal length (a
job reduces one length; the last bucket is padded with zeros), each its own
shared tensor. A hook on each parameter's gradient accumulator copies the
gradient into its bucket once autograd has accumulated it; when a bucket
is complete and the one before it has been averaged, its reduce starts in
the background, so the averages of the last layers run while backward
computes the first. A client has one reduce in flight, so the buckets go
in order, one after another; each carries its index as its tag
(preduce_set_tag), so the scheduler never averages one worker's bucket k
with another's bucket j, even after a failed reduce. Tags need the
allreduce policy: under another, the first refusal raises TagsRefused
(preduce.torch then averages the group's models and state with the
gradients), or, with fallback, switches to one reduce of all buckets per
step, with a warning.
"""

import errno
import warnings

import torch

import preduce


class TagsRefused(preduce.PreduceError):
    """The scheduler refused a tagged reduce: its policy is not allreduce,
    so the job's groups are partial."""


class GradBuckets:
    """The gradient buckets of `tensors` (a PartialReduce's), reduced
    through `client`; `attempt(call, *args)` runs a call and returns None
    after a retryable failure (PartialReduce._attempt)."""

    def __init__(self, client, tensors, cap_floats, timeout_ms, attempt,
                 fallback=True):
        self.client, self.timeout_ms, self._attempt = (client, timeout_ms,
                                                        attempt)
        self.tensors = tensors
        n = sum(t.numel() for t in tensors)
        length = max(1, min(int(cap_floats), n))
        count = -(-n // length)
        self.buffers = [torch.from_numpy(client.tensor(length))
                        for _ in range(count)]
        # Where each tensor's gradient lies: (bucket, bucket offset,
        # tensor offset, floats), in reverse parameter order.
        self._spans = [[] for _ in tensors]
        self._members = [[] for _ in range(count)]  # tensors per bucket
        off = 0
        for i in reversed(range(len(tensors))):
            left, at = tensors[i].numel(), 0
            while left:
                k, pos = divmod(off, length)
                take = min(left, length - pos)
                self._spans[i].append((k, pos, at, take))
                self._members[k].append(i)
                off, at, left = off + take, at + take, left - take
        # fallback: a lone bucket goes untagged (it cannot meet another),
        # and a refusal makes one untagged reduce per step. Otherwise
        # even a lone bucket is tagged: its refusal says the policy.
        self.fallback = fallback
        self.single = count == 1 and fallback  # one untagged reduce a step
        self.sync = True           # False: hooks do nothing (no_sync)
        self.twice = False         # a gradient accumulated twice this step
        self._accumulators = []    # kept alive: the hooks live on them
        for i, t in enumerate(tensors):
            if t.requires_grad:
                acc = t.expand_as(t).grad_fn.next_functions[0][0]
                acc.register_hook(self._hook(i))
                self._accumulators.append(acc)
        self._reset()

    def _reset(self):
        self._fired = [False] * len(self.tensors)
        self._pending = [len(set(m)) for m in self._members]
        self._next = 0          # the next bucket to start
        self._inflight = None   # (bucket, ReduceHandle or None)
        self._ok = [False] * len(self.buffers)
        self._result = None
        self._error = None

    def _hook(self, i):
        def fire(*_):
            if self.sync:
                self._ready(i)
        return fire

    @torch.no_grad()
    def _ready(self, i):
        """Tensor i's gradient is complete: copy it, start what can."""
        if self._fired[i]:
            self.twice = True   # step() says what to do about it
            return
        self._fired[i] = True
        grad = self.tensors[i].grad
        flat = None if grad is None else grad.reshape(-1)
        for k, pos, at, take in self._spans[i]:
            dst = self.buffers[k][pos:pos + take]
            if flat is None:
                dst.zero_()
            else:
                dst.copy_(flat[at:at + take])
        for k in {s[0] for s in self._spans[i]}:
            self._pending[k] -= 1
        if not self.single:
            self._pump(block=False)

    def _pump(self, block):
        """Ends the reduce in flight if it is done (or waits, with block)
        and starts the next complete bucket; errors wait for step()."""
        if self._error is not None:
            return
        try:
            while True:
                if self._inflight is not None:
                    k, h = self._inflight
                    if h is not None:
                        if not block and not h.done():
                            return
                        r = self._attempt(h.wait)
                        self._ok[k] = r is not None
                        self._result = r or self._result
                    self._inflight = None
                if (self._next < len(self.buffers) and
                        self._pending[self._next] <= 0):
                    k = self._next
                    self._next += 1
                    self.client.set_tag(k + 1)
                    self._inflight = (k, self._attempt(
                        self.client.reduce_start, [self.buffers[k]],
                        self.timeout_ms))
                    continue
                return
        except preduce.PreduceError as e:
            self._error = e

    @torch.no_grad()
    def finish(self):
        """At the optimizer step: averages what backward has not, waits
        for every bucket, and writes the averages into the gradients.
        Returns the last Result, or None if a bucket failed (those
        gradients stay this worker's own)."""
        for i in range(len(self.tensors)):
            if not self._fired[i]:  # no gradient, or hooks off (no_sync)
                self._ready(i)
        twice, self.twice = self.twice, False
        if self.single:
            self._reduce_all()
        else:
            self._pump(block=True)
        err = self._error
        refused = (err is not None and err.errno == errno.EINVAL and
                   "tagged" in str(err) and not self.single)
        if refused and not self.fallback:
            self._reset()
            raise TagsRefused(err.errno, str(err))
        if refused:
            # The job's policy groups whoever is ready: one reduce of
            # every bucket per step from now on (no overlap).
            warnings.warn("preduce.torch: gradient buckets need "
                          "scheduler.policy = allreduce; averaging the "
                          "gradients in one reduce per step instead "
                          f"({err})", RuntimeWarning, stacklevel=3)
            self.single = True
            self.client.set_tag(0)
            self._error = None
            self._reduce_all()
            err = self._error
        ok, result = all(self._ok), self._result
        if err is None and not twice:
            for i, t in enumerate(self.tensors):
                if t.grad is None:
                    continue
                flat = t.grad.view(-1)
                for k, pos, at, take in self._spans[i]:
                    if self._ok[k]:
                        flat[at:at + take].copy_(
                            self.buffers[k][pos:pos + take])
        self._reset()
        if err is not None:
            raise err
        if twice:
            raise RuntimeError(
                "preduce.torch: a gradient was accumulated twice before "
                "step() (several backward passes per step, or one that "
                "no step followed): its bucket may have been averaged "
                "before the second pass, so no average was applied; run "
                "all but the step's last backward inside "
                "PartialReduce.no_sync()")
        return result if ok else None

    @torch.no_grad()
    def sync_params(self):
        """Averages the parameters through the buckets (tagged, in order,
        blocking): the replicas then start from one model, as DDP's
        broadcast makes them. True on success."""
        for i, t in enumerate(self.tensors):
            flat = t.detach().reshape(-1)
            for k, pos, at, take in self._spans[i]:
                self.buffers[k][pos:pos + take].copy_(flat[at:at + take])
        ok = []
        if self.single:
            self.client.set_tag(0)
            r = self._attempt(self.client.reduce, self.buffers,
                              self.timeout_ms)
            ok = [r is not None] * len(self.buffers)
        for k, buf in enumerate([] if self.single else self.buffers):
            self.client.set_tag(k + 1)
            try:
                ok.append(self._attempt(self.client.reduce, [buf],
                                        self.timeout_ms) is not None)
            except preduce.PreduceError as e:
                if (e.errno == errno.EINVAL and "tagged" in str(e) and
                        not self.fallback):
                    raise TagsRefused(e.errno, str(e)) from None
                raise
        for i, t in enumerate(self.tensors):
            flat = t.detach().view(-1)
            for k, pos, at, take in self._spans[i]:
                if ok[k]:
                    flat[at:at + take].copy_(self.buffers[k][pos:pos + take])
        return all(ok)

    def close(self):
        """Before the client's memory goes: the hooks do nothing more."""
        self.sync = False
        self.buffers = []

    def _reduce_all(self):
        try:
            r = self._attempt(self.client.reduce, self.buffers,
                              self.timeout_ms)
        except preduce.PreduceError as e:
            self._error = e
            return
        self._ok = [r is not None] * len(self.buffers)
        self._result = r
