"""The first run on a machine compiles its kernels on two cores: a helper process fills numba's cache beside it.

numba compiles one function at a time (under a process-wide lock), about
0.1-0.2 s each, so the first ``cpu`` run after installing or upgrading used to
spend ~2 s compiling on one core while the others idled. When the cache has
not been filled for this handler dtype, :func:`start` (called as the first
handler is created) launches ``python -m sigma_cpu.precompile <dtype>``: a
process that calls every kernel of :class:`~sigma_cpu.kernels.NumbaKernels`
on tiny arrays, which compiles each for exactly the types a run uses and
saves it to the shared disk cache. It begins with what a training step needs
last (the optimiser updates, the backward passes) because the run compiles
what it needs first itself; whatever the helper has saved by the time the
run gets there is loaded instead (numba's cache is written atomically, so a
half-written entry is never read). Then it compiles the parallel twins
large arrays use, and finally writes a stamp so that later processes start
no helper. The helper runs detached and finishes even if the run ends first.

The machine code is the same whichever process compiles it, so results do
not change. ``SIGMA_CPU_PRECOMPILE=0`` turns the helper off; it is also off
on a single usable CPU, where it could only slow the run down.
"""

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy

from . import blas, numba_cache

#: The stamp's name, before its dtype and key; in the cache directory.
STAMP_PREFIX = "sigma-cpu-precompiled-"
#: While a helper runs, this file (holding its process id) sits in the cache directory; its stamp replaces it.
LOCK_SUFFIX = ".lock"
#: A lock older than this is left over from a helper that died; it no longer blocks a new one.
STALE_SECONDS = 600


def _cache_directory() -> Path:
    """Where numba caches the kernels (and the helper keeps its stamp and lock)."""
    import numba

    return Path(numba.config.CACHE_DIR) if numba.config.CACHE_DIR else numba_cache.PACKAGE_DIR / "__pycache__"


def stamp_path(dtype) -> Path:
    """The file that says the helper has filled the cache for ``dtype`` with these kernels, this numba and this
    BLAS provider (oneMKL's dense layer compiles a loop of its own: :mod:`sigma_cpu.blas`)."""
    import numba

    source = (numba_cache.PACKAGE_DIR / "kernels.py").stat()
    key = repr((numba.__version__, sys.version, source.st_mtime_ns, source.st_size, blas.choose()))
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    return _cache_directory() / f"{STAMP_PREFIX}{numpy.dtype(dtype).name}-{digest}"


def _usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def start(dtype) -> bool:
    """Launch the helper for ``dtype`` unless its stamp exists, another helper holds the lock, it is turned off or
    only one CPU is usable; True when launched."""
    if os.environ.get("SIGMA_CPU_PRECOMPILE", "1") == "0" or _usable_cpus() < 2:
        return False
    stamp = stamp_path(dtype)
    if stamp.exists() or not _take_lock(stamp):
        return False
    # The helper neither installs the shared pool (a process of its own: nothing to share) nor starts a helper.
    env = dict(os.environ, SIGMA_CPU_PRECOMPILE="0", SIGMA_CPU_SHARED_POOL="0")
    try:
        subprocess.Popen([sys.executable, "-m", "sigma_cpu.precompile", numpy.dtype(dtype).name, str(stamp)],
                         env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, close_fds=True)
    except OSError:
        _lock(stamp).unlink(missing_ok=True)
        return False
    return True


def _lock(stamp: Path) -> Path:
    return stamp.with_name(stamp.name + LOCK_SUFFIX)


def _take_lock(stamp: Path) -> bool:
    """Create the lock file, or report that a live helper holds it (a stale one is replaced)."""
    lock = _lock(stamp)
    for _ in range(2):
        try:
            stamp.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                if time.time() - lock.stat().st_mtime < STALE_SECONDS:
                    return False
                lock.unlink()
            except FileNotFoundError:
                pass  # the helper just finished: try again
            continue
        except OSError:  # an unwritable cache directory: no helper (the run compiles what it needs, as before)
            return False
        os.write(descriptor, str(os.getpid()).encode())
        os.close(descriptor)
        return True
    return False


def wait(cache_directory, timeout: float = 120.0) -> bool:
    """Wait until no helper holds a lock in ``cache_directory``; False if one still does after ``timeout``.

    For benchmarks and tests, which must not time or delete a cache while a helper writes into it.
    """
    deadline = time.monotonic() + timeout
    while any(Path(cache_directory).glob(f"{STAMP_PREFIX}*{LOCK_SUFFIX}")):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _calls(dtype):
    """The kernel calls that compile every serial kernel for ``dtype``, in the order the helper makes them."""
    from .kernels import NumbaKernels

    kernels = NumbaKernels(dtype, seed=0)
    updates, one = kernels.updates, numpy.ones(8, dtype)

    def arrays(count, shape=(8,)):
        return [numpy.ones(shape, dtype) for _ in range(count)]

    rows, weights = numpy.ones((4, 8), dtype), numpy.ones((8, 3), dtype)
    indices, bytes_ = numpy.zeros(4, numpy.int64), numpy.zeros(4, numpy.uint8)  # the label dtypes of Sigma's sources
    probabilities = numpy.full((4, 3), 1 / 3, dtype)
    g = numpy.ones((), dtype)
    return [  # a step's kernels backwards (the run compiles them forwards), then the others
        lambda: updates.adam(*arrays(4), lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, step=1),
        lambda: kernels.softmax_cross_entropy_backward(g, probabilities, indices),
        lambda: kernels.sum(rows, axis=0),
        lambda: kernels.activation_backward_sum("relu", rows, rows, True),
        lambda: kernels.activation_backward("relu", rows, rows),
        lambda: kernels.softmax_cross_entropy(probabilities, indices),
        lambda: kernels.label_range(indices),
        lambda: kernels.dropout(rows, 0.5),
        lambda: updates.sgd(*arrays(2), lr=0.1),
        lambda: updates.l2_gradient(one, one, 1e-4),
        lambda: kernels.softmax_cross_entropy_backward(g, probabilities, bytes_),
        lambda: kernels.softmax_cross_entropy(probabilities, bytes_),
        lambda: kernels.label_range(bytes_),
        lambda: kernels.softmax_cross_entropy_backward(g, probabilities, probabilities),
        lambda: kernels.softmax_cross_entropy(probabilities, probabilities),
        lambda: kernels.dense(rows, weights, numpy.ones(3, dtype), "relu"),
    ]


def main(argv) -> int:
    """Compile the serial kernels, then the parallel twins for the same types, then write the stamp.

    The stamp is written even if a call fails: a helper that fails would fail
    again, and runs compile what they need themselves, as without a helper.
    """
    dtype, stamp = argv[0], Path(argv[1])
    try:
        for call in _calls(dtype):
            call()
        from .kernels import PAIRS

        for serial, parallel in PAIRS:
            for signature in serial.signatures:
                parallel.compile(signature)
    finally:
        stamp.touch()
        _lock(stamp).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
