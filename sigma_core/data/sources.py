"""A run file's ``[data]`` table: the extractor it names, its paths resolved, its preprocessing.

``source`` names a registered extractor; the other keys are its keyword arguments (checked against its
signature) and the keys every source shares (:data:`COMMON_KEYS`)::

    {"extractor": "csv", "path": ["https://a/x.csv.gz", "mirror/x.csv.gz"], "md5": "...",
     "sections": {"inputs": "0-3", "targets": 4}, "preprocess": [{"normalise": [0, 1]}], "one_hot": 3}
    {"extractor": "csv", "path": "big.csv", "blocks": {"records": 10000, "memory_budget": 100000000}}

An extractor returns a :class:`Dataset`, a dict of arrays, or an iterable of such chunks; a result with a
``derived`` dict (settings found in the data, e.g. a text's vocabulary) makes it the dataset's ``derived`` (none
when a ``blocks`` cache is already built: no extractor runs). ``preprocess`` and ``one_hot`` make a
:class:`Preprocessing`, fitted to the records and kept as the dataset's ``preprocessing``.
``blocks`` hands the chunks and the preprocessing to the cache registered as ``blocks`` (``sigmann-data``:
:func:`~sigma_core.hookspecs.register_caches`), which returns records read block by block within a memory budget.

Arguments named ``path`` or ``*_path`` are resolved by :func:`resolve_path`: the core reads a plain local path
itself; anything else goes to the source registered for its URL scheme
(:func:`~sigma_core.hookspecs.register_sources`; ``sigmann-data`` registers ``http``, ``https`` and ``file``).
"""

import os
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from sigma_core import plugins
from sigma_core.config import check, data_table
from sigma_core.data.dataset import DataError, Dataset, Records
from sigma_core.data.preprocessing import Preprocessing
from sigma_core.errors import ConfigError, UnknownComponentError

COMMON_KEYS = ("extractor", "preprocess", "one_hot", "md5", "sha256", "blocks")
#: What the ``file`` source unpacks; tar forms come before the plain streams they end with.
COMPRESSED_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar", ".zip", ".gz", ".bz2", ".xz")
#: Why a value needs a source, and what the source does with it.
_NEEDS = {"a URL": "download it", "a list of fallbacks": "try them", "compressed": "unpack it",
          "given with a checksum": "check it"}


def resolve_path(value: str | os.PathLike | Sequence[str | os.PathLike], *, md5: str | None = None,
                 sha256: str | None = None, key: str = "path") -> Path:
    """A local path for ``value``, the run file's ``key`` (see the module docstring)."""
    fallbacks = isinstance(value, (list, tuple))
    first = (value[0] if value else None) if fallbacks else value
    if not isinstance(first, (str, os.PathLike)):
        raise DataError(f"{key} must be a path, a URL or a list of them, got {value!r}")
    scheme = urllib.parse.urlparse(first).scheme.lower() if isinstance(first, str) else ""
    scheme = scheme if len(scheme) > 1 else ""  # a one-letter scheme is a Windows drive
    needs = ("a list of fallbacks" if fallbacks else "a URL" if scheme
             else "compressed" if str(first).lower().endswith(COMPRESSED_SUFFIXES)
             else "given with a checksum" if md5 or sha256 else None)
    if needs is None:
        path = Path(value).expanduser()
        if not path.exists():
            where = "" if path.is_absolute() else f" (looked for {path.absolute()}: a relative path is relative " \
                                                  f"to the working directory, {Path.cwd()})"
            raise DataError(f"{key}: file not found: {path}{where}")
        return path
    scheme = scheme or "file"
    try:
        source = plugins.load("source", scheme)
    except UnknownComponentError:
        installed = ", ".join(sorted(n for c in plugins.components("source") for n in (c.name, *c.aliases))) or "none"
        raise DataError(f"{key} {value!r} is {needs}: no {scheme!r} source is installed to {_NEEDS[needs]} "
                        f"(installed sources: {installed}); {plugins.MORE}") from None
    return source(value, md5=md5, sha256=sha256)


def dataset_from_config(cfg: Mapping) -> Records:
    """The dataset a run file's ``data`` table describes (see the module docstring)."""
    cfg = data_table(cfg)
    if "extractor" not in cfg:
        allowed = ", ".join(component.name for component in plugins.components("extractor"))
        raise ConfigError(f"data.extractor is missing; allowed: {allowed}")
    source = cfg["extractor"]
    try:
        extractor = plugins.load("extractor", source)
    except UnknownComponentError as error:  # it lists the extractors
        raise ConfigError(f"data.extractor: {error}") from None
    preprocessing = Preprocessing(cfg.get("preprocess", []), cfg.get("one_hot"))
    cache = None
    if "blocks" in cfg:
        try:
            cache = plugins.load("cache", "blocks")
        except UnknownComponentError:
            raise ConfigError(f"data.blocks needs a cache registered as 'blocks', and none is installed; "
                              f"{plugins.MORE}") from None
    arguments, derived = _arguments(source, extractor, cfg), {}

    def extract():  # the result's ``derived`` settings, if any, become the dataset's
        result = extractor(**arguments)
        derived.update(getattr(result, "derived", {}))
        return result

    try:
        if cache is None:
            dataset = preprocessing(_in_memory(extract(), source), fit=True)
        else:
            dataset = cache(cfg["blocks"], extractor=source, config={k: v for k, v in cfg.items() if k != "blocks"},
                            arguments=arguments, read=lambda: _chunks(extract(), source), preprocessing=preprocessing)
    except MemoryError as error:  # NumPy's message says how much, in what shape
        raise DataError(f"data.extractor {source!r}: not enough memory: {error}") from None
    dataset.preprocessing, dataset.derived = preprocessing, derived
    return dataset


def _arguments(source: str, extractor: Callable, cfg: Mapping) -> dict:
    """The extractor's keyword arguments from ``cfg``, checked against its signature, paths resolved."""
    arguments = {key: value for key, value in cfg.items() if key not in COMMON_KEYS}
    check("data", extractor, arguments, label=f"source {source!r}", shared=COMMON_KEYS)
    for key, value in arguments.items():
        if key == "path" or key.endswith("_path"):
            checksums = {k: cfg.get(k) for k in ("md5", "sha256")} if key == "path" else {}
            arguments[key] = resolve_path(value, **checksums, key=f"data.{key}")
    return arguments


def _chunks(result, source: str) -> Iterator[Dataset]:
    """An extractor's result as datasets: itself, its one dict of arrays, or each chunk it yields."""
    for chunk in [result] if isinstance(result, (Dataset, Mapping)) else result:
        yield chunk if isinstance(chunk, Dataset) else Dataset(chunk, source)


def _in_memory(result, source: str) -> Dataset:
    chunks = list(_chunks(result, source))
    if not chunks:
        raise DataError(f"source {source!r} produced no records")
    if len(chunks) == 1:
        return chunks[0]
    return Dataset({s: np.concatenate([c.section(s) for c in chunks]) for s in chunks[0].section_names}, source)
