"""Batches into device memory through pinned host buffers on a copy stream of their own.

The trainer hands each batch to :meth:`Handler.adopt` inside a session. A copy
from ordinary (pageable) memory would block the host until the device took it.
The prefetching iterator's worker thread therefore copies each batch into
pinned memory (:func:`pin`, through the handler's ``pin_batch``), off the
training path, and from there it goes to the device on a copy stream that
overlaps the compute stream's work. A batch that arrives in ordinary memory is
first copied on the host into a pinned buffer of its slot, while the device is
still busy with the previous step. The compute stream waits for the copy
through an event: nothing waits on the host.

Each (shape, dtype) has a few slots, a pinned and a device buffer each, used by
turns. A slot used in session s is taken again in session s+2 at the earliest,
and the copy stream first waits for the event recorded when session s+1 began
(all of session s's work is queued before it), so a copy never overwrites a
batch the device may still be reading. The pinned buffer is rewritten only once
its last copy has finished (an event, normally long past). After two sessions
an upload allocates nothing.
"""

from __future__ import annotations

import cupy
import cupyx
import numpy


def pin(host: numpy.ndarray, dtype=None) -> numpy.ndarray:
    """A copy of ``host`` in pinned memory (from CuPy's pinned pool), in ``dtype`` if given."""
    out = cupyx.empty_pinned(host.shape, dtype or host.dtype)
    numpy.copyto(out, host, casting="unsafe")
    return out


def is_pinned(host: numpy.ndarray) -> bool:
    return isinstance(host.base, cupy.cuda.PinnedMemoryPointer) and host.flags.c_contiguous


class _Slot:
    __slots__ = ("host", "device", "session", "copied", "source")

    def __init__(self, shape, dtype):
        self.host = None  # its own pinned buffer, made when a batch arrives in ordinary memory
        self.device = cupy.empty(shape, dtype)
        self.session = 0  # the session that last used it
        self.copied = cupy.cuda.Event(disable_timing=True)
        self.source = None  # the pinned array the last copy reads: kept alive until the copy is done


class Uploader:
    """Pinned, stream-ordered uploads for one device (see the module docstring)."""

    def __init__(self):
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self._slots: dict[tuple, list[_Slot]] = {}
        self._session = 0
        self._session_started = [cupy.cuda.Event(disable_timing=True) for _ in range(2)]

    def begin_session(self):
        """Mark on the compute stream where the previous session's work ends."""
        self._session += 1
        self._session_started[self._session % 2].record(cupy.cuda.get_current_stream())

    def release(self, device: cupy.ndarray):
        """Hand the slot holding ``device`` over to its caller (a CUDA graph's input buffer): never used again here."""
        for slots in self._slots.values():
            slots[:] = [slot for slot in slots if slot.device is not device]

    def upload(self, host: numpy.ndarray) -> cupy.ndarray:
        """A device copy of ``host``, valid on the compute stream, readable until the session after next."""
        slots = self._slots.setdefault((host.shape, host.dtype.str), [])
        for slot in slots:
            if slot.session <= self._session - 2:
                break
        else:
            slot = _Slot(host.shape, host.dtype)
            slots.append(slot)
        slot.copied.synchronize()  # its last copy (two sessions ago) is done: its source may change
        if is_pinned(host):
            slot.source = host  # adopt's contract: the caller does not change it
        else:
            if slot.host is None:
                slot.host = cupyx.empty_pinned(host.shape, host.dtype)
            numpy.copyto(slot.host, host)
            slot.source = slot.host
        if slot.session:  # the device buffer was read in session slot.session: wait until that work is done
            self.stream.wait_event(self._session_started[(slot.session + 1) % 2])
        slot.device.set(slot.source, stream=self.stream)
        slot.copied.record(self.stream)
        cupy.cuda.get_current_stream().wait_event(slot.copied)
        slot.session = self._session
        return slot.device
