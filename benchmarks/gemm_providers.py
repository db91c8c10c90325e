"""The ``cpu`` handler's GEMM providers side by side, and the thread split of oneMKL's (issue 38).

For each shape (the character LSTM's recurrent product, the MNIST MLP's and the
small MLP's forward products), in one process, rounds alternating:

* ``openblas``: ``numpy.matmul`` into a preallocated output, OpenBLAS's jobs on
  numba's pool (what the handler does with ``SIGMA_CPU_BLAS=openblas``);
* ``openblas-1``: the same limited to one thread (threadpoolctl);
* ``mkl-1`` / ``mkl-2``: the handler's oneMKL product (``_gemm_blocks``) as one
  block on the calling thread, and as two column blocks on numba's two threads;
* ``mkl-2+bias+relu``: two blocks with the bias pre-filled and relu applied in
  the block (the fused dense layer), against ``openblas+bias+relu``, the
  OpenBLAS path's product followed by its one bias + relu pass.

Prints µs per product (median of rounds) and GFLOP/s; needs the ``mkl`` extra.

Usage: ``python benchmarks/gemm_providers.py [--rounds 9] [--calls 200]``
"""

import argparse
import os
import statistics
import time

import numpy as np

SHAPES = {"lstm 32x256·256x1024": (32, 256, 1024), "mnist 100x784·784x1000": (100, 784, 1000),
          "mnist 100x1000·1000x800": (100, 1000, 800), "small 100x784·784x128": (100, 784, 128)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    from threadpoolctl import threadpool_limits

    from sigma_cpu import kernels

    os.environ["SIGMA_CPU_BLAS"] = "openblas"
    kernels.NumbaKernels("float32")  # installs the shared pool: OpenBLAS's jobs on numba's threads
    os.environ["SIGMA_CPU_BLAS"] = "mkl"
    kernels.NumbaKernels("float32")  # loads oneMKL, sequential
    one, rng = np.float32(1), np.random.default_rng(0)
    for label, (m, k, n) in SHAPES.items():
        x, w = rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)
        bias, out = rng.random(n, dtype=np.float32), np.empty((m, n), np.float32)
        bias_relu = kernels._pick(kernels._bias_relu, out.size)

        def openblas_1():
            with threadpool_limits(1, user_api="blas"):
                np.matmul(x, w, out=out)

        systems = {
            "openblas": lambda: np.matmul(x, w, out=out),
            "openblas-1": openblas_1,
            "mkl-1": lambda: kernels._gemm_blocks[0](x, False, w, False, out, bias, False, False, one, 1),
            "mkl-2": lambda: kernels._gemm_blocks[1](x, False, w, False, out, bias, False, False, one, 2),
            "openblas+bias+relu": lambda: (np.matmul(x, w, out=out), bias_relu(out, bias, True, True)),
            "mkl-2+bias+relu": lambda: kernels._gemm_blocks[1](x, False, w, False, out, bias, True, True, one, 2),
        }
        times = {name: [] for name in systems}
        for _ in range(args.rounds):
            for name, call in systems.items():
                call()
                start = time.perf_counter()
                for _ in range(args.calls):
                    call()
                times[name].append((time.perf_counter() - start) / args.calls)
        print(f"{label}:")
        for name, samples in times.items():
            median = statistics.median(samples)
            print(f"  {name:<20}{median * 1e6:9.1f} µs {2 * m * k * n / median / 1e9:7.1f} GFLOP/s")


if __name__ == "__main__":
    main()
