# SPDX-License-Identifier: MIT
"""Gradients averaged in buckets while backward runs, as
DistributedDataParallel's reducer does (preduce.torch, average="gradients").

The gradients of the parameters that require one are laid out in the
reverse order of the parameters (the order backward produces them) and cut
into K buckets of equal length (a job reduces one length; the last bucket
is padded with zeros), each its own shared tensor. A hook on each
parameter's gradient accumulator copies the gradient into its bucket once
autograd has accumulated it; when a bucket is complete and the one before
it has been averaged, its reduce starts in the background, so the averages
of the last layers run while backward computes the first. The first hook
of a backward pass queues a callback that runs when the pass ends: it
averages what is left, waits for every bucket and writes the averages into
the gradients, so that after backward() the gradients are the group's, as
with DDP (gradient clipping then sees them).

A client has one reduce in flight, so the buckets go in order, one after
another; each carries its index as its tag (preduce_set_tag), so the
scheduler never averages one worker's bucket k with another's bucket j,
even after a failed reduce. The parameters are averaged through the same
buckets with tags of their own (SYNC_TAG) at the first step and after a
failed bucket: rank 0's model, the others healing from it, as DDP's
broadcast. Tags need the allreduce policy: under another, the first
refusal raises TagsRefused (preduce.torch then averages the group's
models and state with the gradients), or, with fallback, switches to one
untagged reduce of all buckets per step, with a warning.
"""

import errno
import time
import warnings

import torch

import preduce

# Tags of the parameter syncs: apart from the gradients' 1..K.
SYNC_TAG = 1 << 31


class TagsRefused(preduce.PreduceError):
    """The scheduler refused a tagged reduce: its policy is not allreduce,
    so the job's groups are partial."""


def _refusal(err):
    """The daemon's refusal of a tag (sched_work.c, pr_sched_on_ready:
    "tagged reduces (gradient buckets) need scheduler.policy =
    allreduce")."""
    return err.errno == errno.EINVAL and "tagged reduces" in str(err)


class GradBuckets:
    """The gradient buckets of `tensors` (a PartialReduce's), reduced
    through `client`; `attempt(call, *args)` runs a call and returns None
    after a retryable failure (PartialReduce._attempt)."""

    def __init__(self, client, tensors, cap_floats, timeout_ms, attempt,
                 fallback=True):
        self.client, self.timeout_ms, self._attempt = (client, timeout_ms,
                                                        attempt)
        # Frozen parameters and buffers have no gradient: left out, as
        # DDP leaves them.
        self.tensors = [t for t in tensors if t.requires_grad]
        if not self.tensors:
            raise ValueError("the model has no parameter that requires a "
                             "gradient")
        n = sum(t.numel() for t in self.tensors)
        length = max(1, min(int(cap_floats), n))
        count = -(-n // length)
        self.buffers = [torch.from_numpy(client.tensor(length))
                        for _ in range(count)]
        # Where each tensor's gradient lies: (bucket, bucket offset,
        # tensor offset, floats), in reverse parameter order.
        self._spans = [[] for _ in self.tensors]
        members = [set() for _ in range(count)]
        off = 0
        for i in reversed(range(len(self.tensors))):
            left, at = self.tensors[i].numel(), 0
            while left:
                k, pos = divmod(off, length)
                take = min(left, length - pos)
                self._spans[i].append((k, pos, at, take))
                members[k].add(i)
                off, at, left = off + take, at + take, left - take
        self._sizes = [len(m) for m in members]
        # fallback: a lone bucket goes untagged (it cannot meet another),
        # and a refusal makes one untagged reduce per step. Otherwise
        # even a lone bucket is tagged: its refusal says the policy.
        self.fallback = fallback
        self.single = count == 1 and fallback  # one untagged reduce a round
        self.sync = True        # False: hooks do nothing (no_sync)
        self.need_sync = True   # the parameters must be made one model
        self.closed = False
        # The accumulators are held: a parameter holds its own only
        # weakly, and a new one would have none of the hooks.
        self._accumulators, self._handles = [], []
        with torch.enable_grad():
            for i, t in enumerate(self.tensors):
                acc = t.expand_as(t).grad_fn.next_functions[0][0]
                self._handles.append(acc.register_hook(self._hook(i)))
                self._accumulators.append(acc)
        self._done = None       # a finished round's (result, error)
        self.wait_seconds = 0.0  # backward's end waiting for the buckets
        self._start_round()

    def _start_round(self):
        self._fired = [False] * len(self.tensors)
        self._pending = list(self._sizes)
        self._next = 0          # the next bucket to start
        self._inflight = None   # (bucket, ReduceHandle or None)
        self._ok = [False] * len(self.buffers)
        self._result = None
        self._error = None
        self._queued = False    # the end-of-backward callback is queued

    def _hook(self, i):
        def fire(*_):
            if self.sync and not self.closed:
                self._ready(i)
        return fire

    @torch.no_grad()
    def _ready(self, i):
        """Tensor i's gradient is complete: copy it, start what can.
        Nothing raises here, inside autograd: errors wait for the round's
        end."""
        try:
            if not self._queued:
                self._queued = True
                torch.autograd.Variable._execution_engine.queue_callback(
                    self._end_of_backward)
            self._copy_in(i)
            if not self.single:
                self._pump(block=False)
        except Exception as e:  # noqa: BLE001 - raised from step()
            self._error = self._error or e

    def _copy_in(self, i):
        if self._fired[i]:
            return  # a second accumulation within one pass: not seen yet
        self._fired[i] = True
        grad = self.tensors[i].grad
        if grad is not None and grad.is_sparse:
            raise TypeError("preduce.torch: sparse gradients are not "
                            "averaged (use a dense nn.Embedding)")
        flat = None if grad is None else grad.reshape(-1)
        for k, pos, at, take in self._spans[i]:
            dst = self.buffers[k][pos:pos + take]
            if flat is None:
                dst.zero_()
            else:
                dst.copy_(flat[at:at + take])
            self._pending[k] -= 1

    def _start(self, k, tag):
        self.client.set_tag(tag)
        try:
            return self._attempt(self.client.reduce_start,
                                 [self.buffers[k]], self.timeout_ms)
        finally:
            self.client.set_tag(0)  # the reduce took it; nothing else may

    def _pump(self, block):
        """Ends the reduce in flight if it is done (or waits, with block)
        and starts the next complete bucket; errors wait for the end."""
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
                    self._inflight = (k, self._start(k, k + 1))
                    continue
                return
        except preduce.PreduceError as e:
            self._error = e

    def _end_of_backward(self):
        """The callback queued by a pass's first hook: the round ends."""
        try:
            self._finish_round()
        except Exception as e:  # noqa: BLE001 - raised from step()
            self._done = (None, e)

    @torch.no_grad()
    def _finish_round(self):
        for i in range(len(self.tensors)):
            if not self._fired[i]:  # unused in this pass: zeros
                self._copy_in(i)
        t0 = time.monotonic()
        if self._error is None:
            if self.single:
                self._reduce_all()
            else:
                self._pump(block=True)
        self.wait_seconds += time.monotonic() - t0
        err = self._error
        if (err is not None and self.fallback and not self.single and
                isinstance(err, preduce.PreduceError) and _refusal(err)):
            # The job's policy groups whoever is ready: one untagged
            # reduce of every bucket per round from now on (no overlap).
            warnings.warn("preduce.torch: gradient buckets need "
                          "scheduler.policy = allreduce; averaging the "
                          "gradients in one reduce per step instead "
                          f"({err})", RuntimeWarning, stacklevel=2)
            self.single = True
            self._error = None
            self._reduce_all()
            err = self._error
        if err is None:
            self._write_back()
            if not all(self._ok):
                self.need_sync = True  # replicas stepped apart: rejoin
        result = self._result if err is None and all(self._ok) else None
        self._start_round()
        self._done = (result, err)

    def _write_back(self):
        """The averages into the gradients (a parameter without one on
        this worker gets the average, as with DDP, so every replica
        steps it)."""
        for i, t in enumerate(self.tensors):
            spans = [s for s in self._spans[i] if self._ok[s[0]]]
            if not spans:
                continue
            if t.grad is None:
                t.grad = torch.zeros_like(t)
            flat = t.grad.reshape(-1)
            for k, pos, at, take in spans:
                flat[at:at + take].copy_(self.buffers[k][pos:pos + take])
            if flat.data_ptr() != t.grad.data_ptr():  # a copy: put back
                t.grad.copy_(flat.view_as(t.grad))

    def finish(self):
        """At the optimizer step: the last backward's round (or, if no
        backward ran since the last step, a round of zeros and present
        gradients now, so every worker reduces once per step). Returns
        its Result, or None if a bucket failed (those gradients stay this
        worker's own); raises what the round raised, TagsRefused for the
        tags' refusal when there is no fallback."""
        if self._done is None:
            self._finish_round()
        (result, err), self._done = self._done, None
        if err is not None:
            if isinstance(err, preduce.PreduceError) and _refusal(err):
                raise TagsRefused(err.errno, str(err))
            raise err
        return result

    @torch.no_grad()
    def sync_params(self):
        """Makes the replicas one model through the buckets (sync tags, in
        order, blocking): rank 0's, the others healing from it (weight 0),
        as DDP's broadcast. A no-op after a fallback to untagged reduces,
        which could meet a peer's gradients. True on success."""
        if self.single:
            self.need_sync = False
            return True
        for i, t in enumerate(self.tensors):
            flat = t.detach().reshape(-1)
            for k, pos, at, take in self._spans[i]:
                self.buffers[k][pos:pos + take].copy_(flat[at:at + take])
        heal = self.client.rank != 0
        ok = []
        try:
            for k in range(len(self.buffers)):
                self.client.set_heal(heal)  # a success clears it
                h = self._start(k, SYNC_TAG | (k + 1))
                ok.append(h is not None and
                          self._attempt(h.wait) is not None)
        except preduce.PreduceError as e:
            if _refusal(e):
                raise TagsRefused(e.errno, str(e)) from None
            raise
        finally:
            self.client.set_heal(False)
        for i, t in enumerate(self.tensors):
            flat = t.detach().reshape(-1)
            for k, pos, at, take in self._spans[i]:
                if ok[k]:
                    flat[at:at + take].copy_(self.buffers[k][pos:pos + take])
        # Not tried again when it failed: a sync no peer joins (a trainer
        # that came late) would hold every step up for a timeout.
        self.need_sync = False
        return all(ok)

    def close(self):
        """Before the client's memory goes: the hooks come off."""
        self.closed = True
        for h in self._handles:
            h.remove()
        self._handles, self._accumulators = [], []
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
