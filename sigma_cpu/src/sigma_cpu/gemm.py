"""oneMKL's GEMM as a call numba-compiled code can make (:func:`cblas_gemm`).

Calling it from compiled code, rather than through NumPy or ctypes, is what
lets one thread of numba's pool fill a block of the output with the bias,
multiply into it (beta = 1) and apply the activation while the block is still
in its cache (the loops in :mod:`sigma_cpu.kernels`), with no Python between.

The machine code calls the symbols :data:`sigma_cpu.blas.SYMBOLS`, which
:func:`sigma_cpu.blas.load` binds to the library's addresses before anything
here compiles or loads; no address of this process is compiled in, so numba's
disk cache keeps it.
"""

from __future__ import annotations

from . import blas, numba_cache

numba = numba_cache.import_numba()
from llvmlite import ir  # noqa: E402
from numba import types  # noqa: E402
from numba.core import cgutils  # noqa: E402
from numba.extending import intrinsic  # noqa: E402

#: CBLAS's enumerations (cblas.h): row-major storage, an operand as stored or transposed.
ROW_MAJOR, NO_TRANSPOSE, TRANSPOSE = 101, 111, 112


@intrinsic
def cblas_gemm(typingctx, transpose_a, transpose_b, m, n, k, alpha, a, a_start, lda, b, b_start, ldb, beta, c,
               c_start, ldc):
    """``cblas_?gemm_64(RowMajor, ...)``: C = alpha·op(A)·op(B) + beta·C, with A, B and C the data of the arrays
    ``a``, ``b`` and ``c`` from their elements ``*_start`` on (numbers of elements, not bytes).

    The arrays' dtype (float32 or float64, all three alike, ``alpha`` and ``beta`` too) picks sgemm or dgemm.
    """
    arrays = (a, b, c)
    if not all(isinstance(x, types.Array) and x.dtype == alpha for x in arrays) or beta != alpha \
            or not isinstance(alpha, types.Float):
        return None
    symbol = blas.SYMBOLS["f" if alpha.bitwidth == 32 else "d"]
    signature = types.void(transpose_a, transpose_b, m, n, k, alpha, a, a_start, lda, b, b_start, ldb, beta, c,
                           c_start, ldc)

    def codegen(context, builder, sig, args):
        i32, i64, scalar = ir.IntType(32), ir.IntType(64), context.get_value_type(alpha)
        pointer = scalar.as_pointer()
        function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
            ir.VoidType(), [i32, i32, i32, i64, i64, i64, scalar, pointer, i64, pointer, i64, scalar, pointer, i64]),
            symbol)

        def integer(index, to=types.int64):
            return context.cast(builder, args[index], sig.args[index], to)

        def data(index):
            array = cgutils.create_struct_proxy(sig.args[index])(context, builder, value=args[index])
            return builder.gep(array.data, [integer(index + 1)])

        builder.call(function, [ir.Constant(i32, ROW_MAJOR), integer(0, types.int32), integer(1, types.int32),
                                integer(2), integer(3), integer(4), args[5], data(6), integer(8), data(9),
                                integer(11), args[12], data(13), integer(15)])
        return context.get_dummy_value()

    return signature, codegen
