"""How fast this machine streams memory through the ``cpu`` kernels: the floor under a step's non-GEMM work.

Issue 28 asks how much of the time a training step spends above its GEMMs is
memory traffic. This times the ``cpu`` handler's compiled Adagrad pass (read
parameter, gradient and squares, write parameter and squares: 5 arrays moved)
over the MNIST MLP's 1,593,810 float32 parameters, serial and parallel on the
shared pool, and over arrays of 256 MB (past most caches), beside a NumPy copy
(read + write) of each size. Bytes moved divided by the median time gives GB/s;
BENCHMARKS.md divides a step's bytes by it.

Usage: ``python benchmarks/memory_traffic.py [--calls N]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy

from sigma_cpu.handler import NumbaHandler
from sigma_cpu.kernels import LOOPS

MNIST_MLP_PARAMETERS = 784 * 1000 + 1000 + 1000 * 800 + 800 + 800 * 10 + 10


def median_seconds(call, calls: int) -> float:
    call()  # compiles or loads the kernel, touches the arrays
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="timed calls per figure (a tenth for 256 MB)")
    args = parser.parse_args()
    NumbaHandler("float32")  # installs the shared pool the parallel pass runs on
    rng = numpy.random.default_rng(0)
    lr, eps = numpy.float32(1e-9), numpy.float32(1e-6)  # a tiny step: the parameters barely move between calls
    for label, size, calls in (("MNIST MLP parameters", MNIST_MLP_PARAMETERS, args.calls),
                               ("256 MB arrays", 64_000_000, max(args.calls // 10, 3))):
        megabytes = size * 4 / 1e6
        param, grad, squares = (rng.random(size, dtype=numpy.float32) for _ in range(3))
        for kind, loop in zip(("serial", "parallel"), LOOPS["adagrad"]):
            seconds = median_seconds(lambda: loop(param, grad, squares, lr, eps), calls)
            print(f"{label}: Adagrad {kind:<8} {seconds * 1e3:8.3f} ms  "
                  f"{5 * megabytes / 1e3 / seconds:6.1f} GB/s (5 x {megabytes:.2f} MB)")
        out = numpy.empty_like(param)
        seconds = median_seconds(lambda: numpy.copyto(out, param), calls)
        print(f"{label}: NumPy copy       {seconds * 1e3:8.3f} ms  {2 * megabytes / 1e3 / seconds:6.1f} GB/s "
              f"(read + write {megabytes:.2f} MB)")


if __name__ == "__main__":
    main()
