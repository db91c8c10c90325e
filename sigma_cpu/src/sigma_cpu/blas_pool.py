"""One thread pool for BLAS and the kernels: OpenBLAS runs its jobs on numba's threads.

On a machine with few cores, OpenBLAS's own worker threads are the problem.
After each matrix product they keep spinning for a while, waiting for the next
one, so an elementwise pass that follows (bias + relu, dropout, the optimiser
update) either runs on one core while the other spins, or, made parallel with
numba's own pool, fights the spinning BLAS thread for that core and gets
slower than serial (measured on 2 cores: parallel Adagrad 0.4-0.5 ms against
0.23 ms serial right after a GEMM).

OpenBLAS (0.3.27 and later) lets a program run its parallel jobs itself:
``openblas_set_threads_callback_function``. :func:`install` hands it a
compiled callback that runs the jobs in a ``prange`` on numba's thread pool,
so matrix products and the ``parallel=True`` kernels share the same threads:
a thread that finishes a GEMM job is the one that picks up the next kernel's
chunk, nothing spins against anything, and the 2-core Adagrad after a GEMM
takes 0.12 ms. OpenBLAS's own threads then sit idle and go to sleep.

Requirements, checked before installing (otherwise BLAS keeps its own
threads and the kernels stay serial, see :data:`PARALLEL`):

* the BLAS is OpenBLAS with the callback entry point;
* numba's threading layer is ``omp`` or ``tbb``: BLAS may be called from
  several Python threads at once, and the ``workqueue`` layer aborts on
  concurrent launches;
* numba has at least as many threads as OpenBLAS: the jobs of one GEMM wait
  for each other's packed panels, so each needs a thread of its own (a job
  left to run after another would wait for it forever). Raising OpenBLAS's
  thread count above numba's afterwards is therefore not supported.

The setting affects every BLAS call of the process (that is the point: the
numpy handler's products run on the same pool), so it is made once, when the
first ``cpu`` handler is created, never on import. ``SIGMA_CPU_SHARED_POOL=0``
turns it off. Results do not change: OpenBLAS splits the work into the same
jobs, and each job computes the same thing on whichever thread runs it. That
holds for products from several Python threads too (concurrent trainers)
because the callback runs one product's jobs at a time (see :func:`_mutex`):
OpenBLAS gives job i of every call the same scratch buffer.
"""

from __future__ import annotations

import ctypes
import os

from . import numba_cache

numba_cache.configure()

import numba  # noqa: E402  (after the cache directory is chosen)
from llvmlite import ir  # noqa: E402
from numba import types  # noqa: E402
from numba.extending import intrinsic  # noqa: E402
from numba.np.ufunc import parallel  # noqa: E402

#: Entry points of OpenBLAS's callback setter and thread count, by build (the
#: scipy-openblas wheels NumPy ships prefix and suffix the symbols).
_SYMBOLS = (
    ("scipy_openblas_set_threads_callback_function64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_set_threads_callback_function", "scipy_openblas_get_num_threads"),
    ("openblas_set_threads_callback_function64_", "openblas_get_num_threads64_"),
    ("openblas_set_threads_callback_function", "openblas_get_num_threads"),
)

#: True once BLAS runs on numba's pool; the kernels use their parallel versions only then.
PARALLEL = False
_state = {"tried": False, "reason": "not installed yet"}
_keep = []  # the callback and its mutex, referenced for as long as OpenBLAS may call them
_get_threads = []  # OpenBLAS's thread-count getter, once installed


@intrinsic
def _call_job(typingctx, dojob, thread, job, data):
    """Call OpenBLAS's ``void dojob(int thread, void *job, int data)`` through its address."""
    signature = types.void(types.intp, types.int32, types.intp, types.int32)

    def codegen(context, builder, sig, args):
        address, thread, job, data = args
        int8_ptr = ir.IntType(8).as_pointer()
        function = ir.FunctionType(ir.VoidType(), [ir.IntType(32), int8_ptr, ir.IntType(32)])
        builder.call(builder.inttoptr(address, function.as_pointer()), [thread, builder.inttoptr(job, int8_ptr), data])
        return context.get_dummy_value()

    return signature, codegen


#: numba.get_num_threads without its error-path print, which numba compiles only while builtins.print is the
#: builtin: ray.init replaces it, and a handler created after that could not install the pool.
_numba_threads = getattr(parallel, "_iget_num_threads", numba.get_num_threads)


@numba.njit(parallel=True)  # not cache=True: see _compile_callback
def _run_jobs(dojob, count, size, jobs, data):
    """Run the ``count`` jobs concurrently, one per pool thread; the job index doubles as the thread number.

    The calling thread may have lowered its numba thread count; the jobs need
    ``count`` threads at once (see the module docstring), so they get them.
    """
    threads = _numba_threads()
    if threads < count:
        numba.set_num_threads(count)
    for i in numba.prange(count):
        _call_job(dojob, numba.int32(i), jobs + i * size, data)
    if threads < count:
        numba.set_num_threads(threads)


def _compile_callback():
    """``openblas_threads_callback`` as a C function pointer; always synchronous, which satisfies either ``sync``.

    Compiled only on installation: a compiled parallel function starts numba's
    pool, and that pool next to OpenBLAS's own threads is what this module avoids.
    Neither it nor :func:`_run_jobs` can be cached on disk (numba's thread-count
    calls are process-specific addresses), so each process compiles them once.
    """
    lock, unlock, mutex = _mutex()
    signature = types.void(types.int32, types.intp, types.int32, types.uintp, types.intp, types.int32)

    @numba.cfunc(signature)
    def callback(sync, dojob, count, size, jobs, data):
        lock(mutex)
        _run_jobs(dojob, count, size, jobs, data)
        unlock(mutex)

    return callback


def _mutex():
    """(lock, unlock, address) of a process-wide pthread mutex that serialises the callback.

    OpenBLAS gives every callback the same per-job scratch buffers (job i of
    any call uses buffer i), so two matrix products from two Python threads
    running their jobs at once overwrite each other's packed panels: wrong
    numbers, silently. One product at a time on the pool is correct by
    construction; a single training thread never waits on it.
    """
    libc = ctypes.CDLL(None)
    lock, unlock, init = libc.pthread_mutex_lock, libc.pthread_mutex_unlock, libc.pthread_mutex_init
    for function in (lock, unlock):
        function.argtypes, function.restype = [ctypes.c_size_t], ctypes.c_int
    _keep.append(ctypes.create_string_buffer(64))  # >= sizeof(pthread_mutex_t); lives as long as the process
    address = ctypes.addressof(_keep[-1])
    init.argtypes, init.restype = [ctypes.c_size_t, ctypes.c_void_p], ctypes.c_int
    init(address, None)
    return lock, unlock, address


@numba.njit(parallel=True, cache=True)
def _warm_up(out):
    """A trivial parallel loop: starts numba's thread pool (and so fixes its threading layer)."""
    for i in numba.prange(out.size):
        out[i] = i


def _openblas():
    """(set_callback, get_num_threads) ctypes functions of the OpenBLAS this process loaded, or None."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower() and "/" in line}
    except OSError:  # not Linux: leave BLAS alone
        return None
    for path in sorted(paths):
        library = ctypes.CDLL(path)
        for setter, getter in _SYMBOLS:
            if hasattr(library, setter) and hasattr(library, getter):
                set_callback, get_threads = getattr(library, setter), getattr(library, getter)
                set_callback.argtypes, set_callback.restype = [ctypes.c_void_p], None
                get_threads.argtypes, get_threads.restype = [], ctypes.c_int
                return set_callback, get_threads
    return None


def install() -> bool:
    """Route OpenBLAS's jobs to numba's pool if everything allows it (once per process); returns :data:`PARALLEL`."""
    global PARALLEL
    if _state["tried"]:
        return PARALLEL
    _state["tried"] = True
    if os.environ.get("SIGMA_CPU_SHARED_POOL", "1") == "0":
        _state["reason"] = "turned off by SIGMA_CPU_SHARED_POOL=0"
        return False
    functions = _openblas()
    if functions is None:
        _state["reason"] = "NumPy's BLAS is not an OpenBLAS with a threads callback"
        return False
    set_callback, get_threads = functions
    if get_threads() > numba.config.NUMBA_NUM_THREADS:
        _state["reason"] = f"OpenBLAS uses {get_threads()} threads, numba only {numba.config.NUMBA_NUM_THREADS}"
        return False
    import numpy

    _warm_up(numpy.empty(2, numpy.int64))
    layer = numba.threading_layer()
    if layer not in ("omp", "tbb"):
        _state["reason"] = f"numba's threading layer is {layer!r}, which cannot take launches from several threads"
        return False
    _keep.append(_compile_callback())
    set_callback(_keep[-1].address)
    _get_threads.append(get_threads)
    os.register_at_fork(after_in_child=lambda: _after_fork_in_child(set_callback))
    PARALLEL = True
    _state["reason"] = f"BLAS runs on numba's {layer} pool"
    return True


def _after_fork_in_child(set_callback):
    """A forked child gets OpenBLAS's own threads back and serial kernels: OpenMP pools do not survive fork."""
    global PARALLEL
    set_callback(None)
    PARALLEL = False
    _state["reason"] = "turned off in a forked child process"


def threads() -> int:
    """How many threads BLAS may use now (threadpoolctl and data-parallel workers change it); 1 before install."""
    return _get_threads[0]() if _get_threads else 1


def describe() -> str:
    """Why the pool is shared or not, for ``sigma bench`` and bug reports."""
    return _state["reason"]
