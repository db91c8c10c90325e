"""Block-wise datasets: records cached on disk as ``.npy`` blocks, loaded within a memory budget.

A block folder (one ``.npy`` file per block and section, and a manifest) is
renamed into place only when complete, so a failed extraction leaves nothing a
later run would trust. A :class:`BlockDataset` indexes records like an
in-memory :class:`sigma_core.Dataset` but holds only the blocks that fit in
half its ``memory_budget`` (the rest is headroom for batches), and shuffles
block by block so an epoch loads each block about once.

:func:`block_cache` is the ``blocks`` cache of a run file's ``[data]`` table
(``blocks = {records = 10000, memory_budget = 100000000}``): it builds the
folder once, keyed by the data table and the state of its local files, and
preprocesses block by block. Steps with statistics of the whole dataset
(adaptive normalise, standardise) are fitted first, one streaming pass each
over the raw records staged beside the cache, so the cache holds what the
in-memory dataset would; only ``shuffle``, which needs every record at once,
is refused.
"""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import numpy as np

from sigma_core import (ConfigError, DataError, Dataset, Preprocessing, Records, atomic_path, partial_prefix,
                        remove_stale, require, split_bounds)

from .sources import data_dir

MANIFEST = "manifest.json"
SETTINGS = ("records", "memory_budget", "directory")


def _block_file(directory: Path, block: int, section: str) -> Path:
    return directory / f"block-{block:05d}.{section}.npy"


def _length(sections: Mapping[str, np.ndarray]) -> int:
    return len(next(iter(sections.values())))


def build_blocks(chunks: Iterable[Mapping[str, np.ndarray]], directory, *, block_records: int,
                 name: str = "") -> Path:
    """Write ``chunks`` (section dicts of any size) to ``directory`` as blocks of ``block_records`` records,
    holding at most one block plus one chunk in memory; an error leaves ``directory`` as it was."""
    if block_records < 1:
        raise DataError(f"block size must be at least 1 record, got {block_records}")
    directory = Path(directory)
    remove_stale(directory.parent)  # the partial folders of builds that were killed
    with atomic_path(directory, folder=True) as partial:
        sizes: list[int] = []
        layout: dict[str, dict] = {}
        pending: list[Mapping[str, np.ndarray]] = []  # records read but not yet written

        def write(block: Mapping[str, np.ndarray]) -> None:
            for section, array in block.items():
                np.save(_block_file(partial, len(sizes), section), np.ascontiguousarray(array))
            sizes.append(_length(block))

        for chunk in chunks:
            chunk = Dataset(chunk, name)[:]  # checks that its sections are aligned
            shape = {section: {"dtype": a.dtype.str, "shape": list(a.shape[1:])} for section, a in chunk.items()}
            if layout and shape != layout:
                raise DataError(f"dataset {name!r}: a chunk has sections {shape}, earlier ones {layout}")
            layout = shape
            pending.append(chunk)
            while sum(map(_length, pending)) >= block_records:
                merged = {s: np.concatenate([c[s] for c in pending]) for s in layout}
                write({s: a[:block_records] for s, a in merged.items()})
                rest = {s: a[block_records:] for s, a in merged.items()}
                pending = [rest] if _length(rest) else []
        if pending:
            write({s: np.concatenate([c[s] for c in pending]) for s in layout})
        if not sizes:
            raise DataError(f"dataset {name!r}: the extractor produced no records")
        manifest = {"name": name, "sections": layout, "blocks": sizes}
        (partial / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return directory


def is_built(directory) -> bool:
    return (Path(directory) / MANIFEST).is_file()


def _manifest(directory: Path) -> dict:
    try:
        return json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError) as error:
        raise DataError(f"no complete block cache in {directory}: {error}") from None


def _load_block(directory: Path, block: int, sections) -> dict[str, np.ndarray]:
    arrays = {}
    for section in sections:
        path = _block_file(directory, block, section)
        try:
            arrays[section] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as error:
            raise DataError(f"cannot read cached block {path}: {error}; delete {directory} to rebuild it") from None
    return arrays


def read_blocks(directory) -> Iterator[dict[str, np.ndarray]]:
    """Every block of a :func:`build_blocks` folder in order, one at a time and uncached, for one pass."""
    directory = Path(directory)
    manifest = _manifest(directory)
    for block in range(len(manifest["blocks"])):
        yield _load_block(directory, block, manifest["sections"])


class BlockDataset(Records):
    """Records read block by block from a :func:`build_blocks` folder; subsets are views of the same folder."""

    sorted_parts = True  # split parts in file order, so a batch reads few blocks

    def __init__(self, directory, memory_budget: int, *, records: np.ndarray | None = None, name: str | None = None):
        self.directory = Path(directory)
        manifest = _manifest(self.directory)
        self.name = manifest["name"] if name is None else name
        self.memory_budget = int(memory_budget)
        self._layout = {s: (np.dtype(v["dtype"]), tuple(v["shape"])) for s, v in manifest["sections"].items()}
        self._offsets = np.concatenate([[0], np.cumsum(manifest["blocks"])]).astype(np.int64)
        record_bytes = sum(dtype.itemsize * math.prod(shape) for dtype, shape in self._layout.values())
        self._block_bytes = int(max(manifest["blocks"])) * record_bytes
        if self._block_bytes > self.memory_budget // 2:
            raise DataError(f"{self.directory}: a block takes {self._block_bytes} bytes, more than half the "
                            f"memory budget of {self.memory_budget}; rebuild with smaller blocks")
        total = int(self._offsets[-1])
        self._records = np.arange(total, dtype=np.int64) if records is None else np.asarray(records, np.int64)
        self._loaded: OrderedDict[int, dict[str, np.ndarray]] = OrderedDict()

    @property
    def section_names(self) -> tuple[str, ...]:
        return tuple(self._layout)

    @property
    def block_count(self) -> int:
        return len(self._offsets) - 1

    def __len__(self) -> int:
        return len(self._records)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{s}={shape} {dtype}" for s, (dtype, shape) in self._layout.items())
        return f"BlockDataset({self.name!r}, {len(self)} records in {self.block_count} blocks: {shapes})"

    def __getitem__(self, index) -> dict[str, np.ndarray]:
        """The records at ``index`` (an index array or a slice) from every section, in that order."""
        ids = self._records[index]
        blocks = self._blocks_of(ids)
        out = {s: np.empty((len(ids), *shape), dtype) for s, (dtype, shape) in self._layout.items()}
        for block in np.unique(blocks):
            rows = blocks == block
            for section, array in self._block(int(block)).items():
                out[section][rows] = array[ids[rows] - self._offsets[block]]
        return out

    def block_positions(self) -> list[np.ndarray]:
        """Positions of the records grouped by block, in file order."""
        blocks = self._blocks_of(self._records)
        return [np.flatnonzero(blocks == block) for block in np.unique(blocks)]

    def epoch_order(self, rng: np.random.Generator) -> np.ndarray:
        """Positions grouped by block: blocks in random order, records shuffled within each."""
        blocks = self._blocks_of(self._records)
        groups = [np.flatnonzero(blocks == block) for block in rng.permutation(np.unique(blocks))]
        return np.concatenate([rng.permutation(group) for group in groups]) if groups else np.arange(0)

    def select(self, index, name: str | None = None) -> BlockDataset:
        """A view of the records at ``index``, in that order."""
        return BlockDataset(self.directory, self.memory_budget, records=self._records[index],
                            name=self.name if name is None else name)

    def split_blocks(self, *fractions: float, shuffle: bool = False, seed: int = 0) -> tuple[BlockDataset, ...]:
        """Block-wise split: whole blocks go to each part, so parts never share a block."""
        blocks = self._blocks_of(self._records)
        present = np.unique(blocks)
        if shuffle:
            present = np.random.default_rng(seed).permutation(present)
        bounds = split_bounds(len(present), fractions, self.name)
        return tuple(self.select(np.flatnonzero(np.isin(blocks, present[a:b])), f"{self.name}[blocks {i}]")
                     for i, (a, b) in enumerate(zip(bounds, bounds[1:])))

    def _blocks_of(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self._offsets, ids, side="right") - 1

    def _block(self, block: int) -> dict[str, np.ndarray]:
        """Block ``block``'s arrays, loaded (evicting the least recently used) when not held."""
        if block in self._loaded:
            self._loaded.move_to_end(block)
            return self._loaded[block]
        while self._loaded and (len(self._loaded) + 1) * self._block_bytes > self.memory_budget // 2:
            self._loaded.popitem(last=False)
        self._loaded[block] = _load_block(self.directory, block, self._layout)
        return self._loaded[block]


# -- the run file's ``[data] blocks`` ---------------------------------------------------------------------------------


def _cache_directory(config: Mapping, arguments: Mapping, settings: Mapping) -> Path:
    """A folder keyed by the data table and the state of its local files, so an edit rebuilds the cache."""
    if "directory" in settings:
        return Path(settings["directory"])
    key = dict(config) | {"records": settings["records"]}
    for name, value in arguments.items():
        if isinstance(value, Path) and value.exists():
            stat = value.stat()
            key[f"{name}:stat"] = [str(value), stat.st_size, stat.st_mtime_ns]
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return data_dir() / "blocks" / f"{config['extractor']}-{digest}"


def block_cache(settings, *, extractor: str, config: Mapping, arguments: Mapping,
                read: Callable[[], Iterable[Dataset]], preprocessing: Preprocessing) -> BlockDataset:
    """The ``blocks`` cache (see the module docstring and :func:`sigma_core.hookspecs.register_caches`)."""
    if not isinstance(settings, Mapping) or set(settings) - set(SETTINGS):
        raise ConfigError(f"data.blocks must be a table with keys {', '.join(SETTINGS)}, got {settings!r}")
    for key in ("records", "memory_budget"):
        require(f"data.blocks.{key}", "int >= 1", settings.get(key))
    if "shuffle" in preprocessing.names:
        raise ConfigError("data.preprocess.shuffle needs the whole dataset, which data.blocks does not hold in "
                          "memory; drop it (the minibatch iterator shuffles every epoch) or drop data.blocks")
    directory = _cache_directory(config, arguments, settings)
    if not is_built(directory):
        def build(chunks: Iterable[Dataset]) -> None:
            build_blocks((preprocessing(chunk)[:] for chunk in chunks), directory,
                         block_records=settings["records"], name=extractor)

        if not preprocessing.adaptive:
            build(read())
        else:  # adaptive transforms need every record first: stage the raw records beside the cache, fit over them
            directory.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=directory.parent, prefix=partial_prefix(directory)) as staging:
                raw = build_blocks((chunk[:] for chunk in read()), Path(staging) / "raw",
                                   block_records=settings["records"], name=extractor)
                preprocessing.fit(lambda: (Dataset(block, extractor) for block in read_blocks(raw)))
                build(Dataset(block, extractor) for block in read_blocks(raw))
    return BlockDataset(directory, settings["memory_budget"])
