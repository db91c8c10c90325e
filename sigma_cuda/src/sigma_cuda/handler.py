"""The ``cuda`` handler: the reference handler's contract on an NVIDIA GPU, through CuPy."""

from __future__ import annotations

import functools
import inspect

import cupy
import numpy

from sigma_core import Handler, SigmaError

from . import devices, upload
from .kernels import CudaKernels, use_device


class CudaHandler(Handler):
    """Device memory, cuBLAS matrix products, the fused kernels of :mod:`sigma_cuda.kernels` (float32 or float64).

    Autodiff, sessions and every op the kernels do not override are inherited,
    so the conformance kit (``sigmann_testing.HandlerConformance``) checks it
    op by op, plugin ops included, against the numpy handler. Work is
    queued on the device and read back only when asked (``to_numpy``, a hook
    reading a value, the progress display). ``device`` picks the GPU (``cuda:1``).
    """

    name = "cuda"
    kernels_class = CudaKernels
    compiles_kernels = True  # NVRTC compiles kernels.cu on first use (then CuPy's disk cache)
    takes_device = True

    def __init__(self, dtype="float32", seed=None, device=0):
        index = devices.parse_device(device)
        count = cupy.cuda.runtime.getDeviceCount()
        if index >= count:
            raise SigmaError(f"handler 'cuda:{index}': there is no CUDA device {index} "
                             f"({devices.describe(devices.probe_driver().devices)})")
        self.device = cupy.cuda.Device(index)
        self.device.use()  # this thread's current device: kernels and buffers go there
        super().__init__(dtype, seed)

    @classmethod
    def availability(cls) -> tuple[bool, str]:
        """CuPy's own view, after the registered driver check: catches a CuPy that cannot load its runtime."""
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except cupy.cuda.runtime.CUDARuntimeError as error:
            return False, f"CuPy cannot use the CUDA driver: {error}"
        return (True, "") if count else (False, "no CUDA device")

    def __repr__(self):
        return f"<CudaHandler cuda:{self.device.id} {self.dtype}>"

    def begin_session(self):
        super().begin_session()
        self.kernels.uploader.begin_session()

    def pin_batch(self, batch: dict) -> dict:
        """``batch`` with its numeric arrays copied into pinned memory, floats in the handler's dtype: the
        prefetching iterator calls this on its worker thread, so :meth:`adopt` uploads without a host copy."""
        return {key: upload.pin(value, self.dtype if value.dtype.kind == "f" else None)
                if isinstance(value, numpy.ndarray) and value.dtype.kind in "fiub" else value
                for key, value in batch.items()}


def _on_its_device(method):
    """``method``, first making the handler's device current on the calling thread (:func:`~.kernels.use_device`):
    ``Device.use()`` in ``__init__`` applies to that thread only, and the loop's own thread (``Loop.start``),
    threaded hooks and the prefetching worker call the handler too."""

    @functools.wraps(method)
    def on_device(self, *args, **kwargs):
        use_device(self.device.id)
        return method(self, *args, **kwargs)

    return on_device


# Every public method of the handler contract: any of them may be a thread's first call.
for _name, _method in inspect.getmembers(CudaHandler, inspect.isfunction):
    if not _name.startswith("_"):
        setattr(CudaHandler, _name, _on_its_device(_method))
