"""Recorded training steps as CUDA graphs: one launch per step.

sigmann-replay (the ``replay`` step compiler, :mod:`sigmann_replay.replay`) records a training step's
kernel calls; on the ``cuda`` handler it asks :meth:`CudaKernels.capture
<sigma_cuda.kernels.CudaKernels.capture>`, and they are captured once as a CUDA graph, on a stream of
their own (CuPy stream capture). This module imports no plugin: the recording brings what the capture needs
from sigmann-replay (its pool of recorded buffers, ``recording.replay_pool()``, and ``recording.declined``, the
exception that declines a capture). Nothing runs while capturing and nothing may be allocated: the replay pool
hands every kernel the buffers it had when recorded, so the graph's memory is the recording's, and CuPy's allocator
refuses while capturing (memory a graph kept would be handed out again by the
pool). Each later step of that signature is then

1. the batch copied into the recorded input buffers (through pinned memory, in
   :data:`TURNS` sets used by turns) on the graph's stream, the labels' range
   taken on the host;
2. the recording's host checks (class labels) and the optimiser's counters, as
   :meth:`Recording.replay <sigmann_replay.Recording.replay>` does them;
3. the scalars that change from step to step written into one pinned array and
   copied to the device in one transfer: each dropout call's stream key (fresh
   masks), each update's hyperparameters (a schedule takes effect), the weight
   decay. The graph's kernels read them there (kernels.cu's ``S = const T*``
   instantiations): a captured launch keeps the arguments it was captured with;
4. one graph launch. The cost check is the handler's deferred one
   (:meth:`CudaKernels.all_finite`), captured between forward and backward.

The graph waits for the compute stream's work before it runs, and the compute
stream for the graph after it, so a replayed step is ordered with all other
work; the copies wait only for the previous graph (the same stream), so the host
may queue steps behind a busy device, as with :mod:`sigma_cuda.upload`.

A step that cannot be captured (a kernel that allocates while captured, one that
makes its own result buffer, an update on CuPy's generic path, CUDA refusing
something while capturing) declines: its steps run normally, unrecorded, and the
log says why once, as ``not captured: <op> <why>`` (sigmann-replay logs each
reason once).
"""

from __future__ import annotations

import contextlib

import cupy
import cupyx
import numpy


from .kernels import use_device
from .upload import is_pinned

SLOT = 8  #: bytes per device scalar: a double or dropout's 64-bit key
TURNS = 4  #: pinned sets of a step's batch and scalars: how many steps the host may queue ahead of the device


class _Turn:
    """Pinned copies of one step's batch and scalars; rewritten :data:`TURNS` steps later, once its copies are done."""

    def __init__(self, inputs, size):
        self.copied = cupy.cuda.Event(disable_timing=True)
        self.inputs = {key: cupyx.empty_pinned(device.shape, device.dtype) for key, device in inputs.items()}
        self.scalars = cupyx.empty_pinned((size,), numpy.uint8)
        self.sources = []  # the caller's pinned batch arrays the copies read


class GraphStep:
    """One recorded step (a :class:`~sigmann_replay.Recording` and its calls, one per record) as a CUDA graph."""

    def __init__(self, kernels, recording, calls):
        self.kernels, self.recording = kernels, recording
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.ready, self.done = (cupy.cuda.Event(disable_timing=True) for _ in range(2))
        self.inputs = recording.copied  # batch key -> recorded device buffer
        for device in self.inputs.values():
            kernels.uploader.release(device)  # the graph reads it: no upload may reuse it
        counts = [self._scalars(record, call) for record, call in zip(recording.records, calls)]
        self.host = numpy.zeros(SLOT * max(sum(counts), 1), numpy.uint8)  # the scalars, written by the host
        self.device = cupy.zeros(self.host.shape, numpy.uint8)  # and read by the graph
        self.turns, self.turn = [_Turn(self.inputs, self.host.size) for _ in range(TURNS)], 0
        self.next = 0  # the next free slot
        self.checks, self.draws, self.rules = [], [], []  # host checks; dropout keys; (host scalars, their values)
        steps = list(zip(recording.records, recording.forms, calls, counts))
        pool, kernels.pool = kernels.pool, recording.replay_pool()
        self.current = "all_finite"  # the call being captured, for messages
        try:
            with cupy.cuda.using_allocator(self._refuse), self.stream:
                self.stream.begin_capture()
                try:
                    for step in steps[:recording.mark]:
                        self._add(*step)
                    recording.trainer.check_cost(recording.cost)  # the deferred device check, in the graph
                    for step in steps[recording.mark:]:
                        self._add(*step)
                except BaseException:
                    with contextlib.suppress(Exception):
                        self.stream.end_capture()
                    raise
                self.graph = self.stream.end_capture()
            # the first copies wait for the recorded step, which read the input buffers
            self.stream.wait_event(cupy.cuda.get_current_stream().record(self.ready))
        except recording.declined:
            raise
        except Exception as error:  # CUDA or CuPy refused something: the steps run normally, the log says why
            raise self.recording.declined(f"not captured: {self.current} failed while captured as a CUDA graph "
                                f"({type(error).__name__}: {error})") from error
        finally:
            kernels.pool = pool

    def _refuse(self, size):
        """The allocator while capturing: a graph would keep the memory, which CuPy's pool would hand out again.
        The reason names the op only (no size: each batch shape would make another reason, logged again)."""
        raise self.recording.declined(f"not captured: {self.current} allocates device memory while captured as a CUDA graph")

    @staticmethod
    def _name(record) -> str:
        """A record's name in messages: ``part.kernel``, or a plugin op's rule (``run_op`` runs every one)."""
        part, name, args = record[0], record[1], record[3]
        if name == "run_op" and args:
            name = getattr(args[0], "__qualname__", name)
        return f"{part}.{name}" if part else name

    def _scalars(self, record, call) -> int:
        """How many device scalars a record's kernel reads: those that change between steps."""
        part, name = record[0], record[1]
        if part == "updates" and name != "l2_gradient":
            if name not in self.kernels.updates._read:
                raise self.recording.declined(f"not captured: updates.{name} has no CUDA kernel reading its hyperparameters")
            return len(self.kernels.updates.rules[name].scalars(**call[2]))
        return int(call is not None and name in ("l2_gradient", "dropout") and part in ("updates", ""))

    def _slots(self, count, dtype):
        """``count`` new device scalars of ``dtype`` and their host twins (1-element views of the packed arrays)."""
        spans = [slice(SLOT * i, SLOT * i + numpy.dtype(dtype).itemsize) for i in range(self.next, self.next + count)]
        self.next += count
        return [self.device[s].view(dtype) for s in spans], [self.host[s].view(dtype) for s in spans]

    def _add(self, record, form, call, count):
        """Capture one recorded call (or keep it for the host: a check)."""
        part, name, _, args, _, new, result = record
        k, self.current = self.kernels, self._name(record)
        if call is None:  # a view: later calls hold it
            return
        if form == "check":
            self.checks.append(call)
        elif form not in ("kernel", "array module"):
            raise self.recording.declined(f"not captured: {self.current} makes its own result buffer, which a CUDA graph "
                                "cannot allocate")
        elif not count:
            call[0](*call[1], **call[2])
        else:
            k.pool.next += len(new)  # the kernel's recorded buffers, passed below
            device, host = self._slots(count, numpy.uint64 if name == "dropout" else k.dtype)
            if name == "dropout":
                fits = k._fits(args[0])
                if fits:
                    k._dropout(args[0], args[1], *result, device[0])
                self.draws.append(host[0])
            elif name == "l2_gradient":
                fits = k.updates._run(name, (*call[1][:2], result), *device, flag=False)
                self.rules.append((host, lambda call=call: (call[1][2],)))  # the weight decay, set by the prologue
            else:
                fits = k.updates._run(name, tuple(call[1]), *device)
                scalars = k.updates.rules[name].scalars
                self.rules.append((host, lambda call=call, scalars=scalars: scalars(**call[2])))  # as the prologue sets
            if not fits:
                raise self.recording.declined(f"not captured: {self.current} took CuPy's generic path, "
                                    "whose scalars a CUDA graph would fix")

    def replay(self, batch: dict):
        """One step on ``batch`` (see the module docstring); returns the cost, a handler number."""
        k, stream = self.kernels, self.stream
        use_device(k.device_id)  # replays begin no session: the handler's begin_session has not set it
        turn = self.turns[self.turn % TURNS]
        self.turn += 1
        turn.copied.synchronize()  # its copies (TURNS steps ago) have read its pinned arrays: they may change
        turn.sources.clear()
        for key, device in self.inputs.items():
            host = batch[key]
            if not (type(host) is numpy.ndarray and host.dtype == device.dtype and is_pinned(host)):
                numpy.copyto(turn.inputs[key], host, casting="unsafe")
                host = turn.inputs[key]
            turn.sources.append(host)
            k._remember_labels(device, host)
        for host in self.draws:
            host[0] = k.streams.next()
        for check, args, _ in self.checks:
            check(*args)
        self.recording.optimiser_prologue()
        for hosts, values in self.rules:
            for host, value in zip(hosts, values()):
                host[0] = value
        numpy.copyto(turn.scalars, self.host)
        for device, host in zip(self.inputs.values(), turn.sources):
            device.set(host, stream=stream)
        self.device.set(turn.scalars, stream=stream)
        turn.copied.record(stream)
        compute = cupy.cuda.get_current_stream()
        stream.wait_event(compute.record(self.ready))
        self.graph.launch(stream=stream)
        compute.wait_event(stream.record(self.done))
        k._checks_pending = True  # the captured cost check may have set the flag
        return self.recording.cost
