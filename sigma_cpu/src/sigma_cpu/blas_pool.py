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

numba = numba_cache.import_numba()
from llvmlite import binding as llvm  # noqa: E402
from llvmlite import ir  # noqa: E402
from numba import types  # noqa: E402
from numba.core import cgutils  # noqa: E402
from numba.core.ccallback import CFunc  # noqa: E402
from numba.core.sigutils import normalize_signature  # noqa: E402
from numba.extending import intrinsic  # noqa: E402

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
_keep = []  # the callback, referenced for as long as OpenBLAS may call it
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


@intrinsic
def _num_threads(typingctx, count):
    """numba's get_num_threads (``count`` None) or set_num_threads(count) as plain calls of the symbols numba's
    threading layer registers when its pool starts (the ones its own ``prange`` loops call).

    numba's own versions cannot be used here: set_num_threads calls through a
    ctypes pointer (an address of this process, which keeps a function from
    being cached on disk), and get_num_threads has an error path that prints,
    which numba compiles only while ``builtins.print`` is the builtin
    (``ray.init`` replaces it, and a handler created after that could not
    install the pool).
    """
    getting = isinstance(count, (types.NoneType, types.Omitted))
    if not (getting or isinstance(count, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        if getting:
            function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(cgutils.intp_t, []),
                                                      "get_num_threads")
            return builder.call(function, [])
        function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [cgutils.intp_t]),
                                                  "set_num_threads")
        builder.call(function, [context.cast(builder, args[0], sig.args[0], types.intp)])
        return context.get_dummy_value()

    return (types.intp(count) if getting else types.void(count)), codegen


#: The symbols the callback's machine code calls to take and release its mutex (:func:`_mutex`), registered with
#: LLVM's linker before the callback is compiled or loaded from the cache.
_LOCK, _UNLOCK = "sigma_cpu_blas_pool_lock", "sigma_cpu_blas_pool_unlock"


@intrinsic
def _mutex(typingctx, release):
    """Take (``release`` False) or release (True) the process-wide mutex that serialises the callback.

    OpenBLAS gives every callback the same per-job scratch buffers (job i of
    any call uses buffer i), so two matrix products from two Python threads
    running their jobs at once overwrite each other's packed panels: wrong
    numbers, silently. One product at a time on the pool is correct by
    construction; a single training thread never waits on it.

    The mutex is a global of the callback's own machine code, zero-initialised:
    that is ``PTHREAD_MUTEX_INITIALIZER`` on Linux (glibc and musl), the only
    system :func:`install` runs on. Each process that loads the code gets its own.
    """
    if not isinstance(release, types.BooleanLiteral):
        return None

    def codegen(context, builder, sig, args):
        module, byte_pointer = builder.module, ir.IntType(8).as_pointer()
        try:
            mutex = module.get_global("sigma_cpu_blas_pool_mutex")
        except KeyError:
            mutex = ir.GlobalVariable(module, ir.ArrayType(ir.IntType(8), 64), "sigma_cpu_blas_pool_mutex")
            mutex.initializer = ir.Constant(mutex.value_type, None)  # >= sizeof(pthread_mutex_t)
            mutex.linkage, mutex.align = "internal", 64
        name = _UNLOCK if sig.args[0].literal_value else _LOCK
        function = cgutils.get_or_insert_function(module, ir.FunctionType(ir.IntType(32), [byte_pointer]), name)
        builder.call(function, [builder.bitcast(mutex, byte_pointer)])
        return context.get_dummy_value()

    return types.void(release), codegen


@numba_cache.cached
@numba.njit(parallel=True)
def _run_jobs(dojob, count, size, jobs, data):
    """Run the ``count`` jobs concurrently, one per pool thread; the job index doubles as the thread number.

    The calling thread may have lowered its numba thread count; the jobs need
    ``count`` threads at once (see the module docstring), so they get them.
    """
    threads = _num_threads(None)
    if threads < count:
        _num_threads(count)
    for i in numba.prange(count):
        _call_job(dojob, numba.int32(i), jobs + i * size, data)
    if threads < count:
        _num_threads(threads)


def _callback(sync, dojob, count, size, jobs, data):
    """``openblas_threads_callback``: always synchronous, which satisfies either ``sync``; one product at a time."""
    _mutex(False)
    _run_jobs(dojob, count, size, jobs, data)
    _mutex(True)


def _compile_callback():
    """:func:`_callback` as a C function pointer, loaded from numba's disk cache after the first process.

    Compiled only on installation: a compiled parallel function starts numba's
    pool, and that pool next to OpenBLAS's own threads is what this module
    avoids. Its machine code holds no address of this process (the mutex is
    its own global; the functions it calls are symbols, linked on loading), so
    it is cached on disk: compiling it costs ~0.3-0.5 s, loading it a few
    milliseconds (it used to be compiled in every process).
    """
    libc = ctypes.CDLL(None)
    for symbol, function in ((_LOCK, libc.pthread_mutex_lock), (_UNLOCK, libc.pthread_mutex_unlock)):
        llvm.add_symbol(symbol, ctypes.cast(function, ctypes.c_void_p).value)
    signature = types.void(types.int32, types.intp, types.int32, types.uintp, types.intp, types.int32)
    callback = numba_cache.cached(CFunc(_callback, normalize_signature(signature), locals={}, options={}), _callback)
    callback.compile()  # what numba.cfunc(signature, cache=True) does, with numba_cache's loading
    return callback


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
    numba.get_num_threads()  # launches numba's threads, which fixes its threading layer, compiling nothing
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
