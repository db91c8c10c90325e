"""Time per epoch with and without :class:`PrefetchIterator`, on a fast consumer.

The data is a :class:`BlockDataset` of MNIST-shaped float32 records (784
features) on disk, with a memory budget a quarter of its size, so every epoch
reads blocks back from the cache folder and gathers shuffled minibatches. Two
sources are timed:

* ``blocks``: the block cache as it is;
* ``blocks+latency``: each batch also waits ``--latency-ms`` (default 2 ms),
  standing in for an expensive extraction (decoding, a network file system).

The consumer is a "fast handler": one 784x256 float32 matrix product and a
ReLU per batch of 100, about as long as a small MLP's forward pass on a CPU.
BLAS is limited to one thread (threadpoolctl) so the consumer does not
compete with the prefetch thread for cores, as on a machine where each
worker owns one core. After one warm-up epoch each, epochs alternate
(plain, prefetch, plain, ...) so that drifting machine load hits both alike;
the median epoch time is reported.

Usage: ``python benchmarks/prefetch.py [--records N] [--epochs E] [--latency-ms MS]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from sigma_core.data import MinibatchIterator, PrefetchIterator
from sigmann_data.blocks import BlockDataset, build_blocks


class Delayed:
    """A dataset view whose every batch takes ``seconds`` longer to produce."""

    def __init__(self, dataset, seconds: float):
        self.dataset, self.seconds = dataset, seconds

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        time.sleep(self.seconds)
        return self.dataset[index]

    def epoch_order(self, rng):
        return self.dataset.epoch_order(rng)


def chunks(records: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for start in range(0, records, 1000):
        n = min(1000, records - start)
        yield {"inputs": rng.random((n, 784), dtype=np.float32), "targets": rng.integers(0, 10, n)}


def one_epoch(iterator, weights: np.ndarray) -> float:
    started = time.perf_counter()
    for batch in iterator:
        np.maximum(batch["inputs"] @ weights, 0)
    return time.perf_counter() - started


def compare(source, weights: np.ndarray, epochs: int) -> tuple[float, float]:
    """Median epoch seconds without and with prefetch, epochs interleaved after a warm-up each."""
    plain = MinibatchIterator(source, 100, seed=0)
    ahead = PrefetchIterator(MinibatchIterator(source, 100, seed=0), depth=4)
    one_epoch(plain, weights), one_epoch(ahead, weights)
    times = [(one_epoch(plain, weights), one_epoch(ahead, weights)) for _ in range(epochs)]
    return statistics.median(t for t, _ in times), statistics.median(t for _, t in times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--latency-ms", type=float, default=2.0)
    args = parser.parse_args()

    weights = np.random.default_rng(1).random((784, 256), dtype=np.float32)
    with tempfile.TemporaryDirectory() as folder:
        build_blocks(chunks(args.records), Path(folder) / "blocks", block_records=1000)
        data_bytes = args.records * (784 * 4 + 8)
        dataset = BlockDataset(Path(folder) / "blocks", data_bytes // 4)
        print(f"{args.records} records, {data_bytes / 2**20:.1f} MiB on disk, budget {data_bytes / 4 / 2**20:.1f} MiB, "
              f"batch 100, median of {args.epochs} epochs")
        print(f"{'source':<18}{'no prefetch':>14}{'prefetch':>12}{'speed-up':>10}")
        for name, source in (("blocks", dataset), ("blocks+latency", Delayed(dataset, args.latency_ms / 1000))):
            with threadpool_limits(1):
                plain, ahead = compare(source, weights, args.epochs)
            print(f"{name:<18}{plain * 1000:>12.0f}ms{ahead * 1000:>10.0f}ms{plain / ahead:>9.2f}x")


if __name__ == "__main__":
    main()
