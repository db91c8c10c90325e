"""Sigma's data sources and block cache, registered without importing pooch or NumPy.

The ``https`` source (also ``http`` and ``file``) resolves a run file's data
``path`` when the core does not read it itself: a URL, a list of fallbacks, a
compressed file or a checksummed one (:mod:`sigmann_data.sources`). The
``blocks`` cache serves ``[data] blocks = {...}`` (:mod:`sigmann_data.blocks`).
"""

from sigma_core import hookimpl


@hookimpl
def register_sources(register):
    register("https", "sigmann_data.sources:resolve", aliases=("http", "file"),
             description="downloads (pooch: checksums, retries), fallback lists, archives unpacked once")


@hookimpl
def register_caches(register):
    register("blocks", "sigmann_data.blocks:block_cache",
             description="[data] blocks: records cached on disk as .npy blocks, read within a memory budget")
