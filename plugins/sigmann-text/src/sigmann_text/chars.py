"""The ``chars`` extractor: a text file as (sequence, next character) windows of vocabulary indices.

Sigma's ``CharacterRecordReader``. Window ``k`` starts at character
``k * stride``: its ``inputs`` are ``sequence`` character indices and its
``targets`` the same span shifted by one (the next character of every step, for
a time-distributed output, shaped (sequence, 1)), or with ``target = "next"``
only the character after the window. Indices are small integers (uint8 up to 256 symbols): the
one-hot encoding happens on the handler, in the ``one_hot`` layer, so a
dataset is as small as its text.

The file is read in chunks twice (once for the vocabulary, once for the
windows) and the windows come out chunk by chunk, so with ``data.blocks`` a
text bigger than memory streams into the block cache. ``encoding = "bytes"``
makes the symbols the file's bytes; otherwise it is decoded (``errors`` as in
:meth:`bytes.decode`: ``"strict"`` refuses undecodable bytes, ``"replace"``
maps them to U+FFFD).
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from sigma_core import DataError, check_readable

CHUNK_BYTES = 1 << 20


def _symbols(path: Path, encoding: str, errors: str) -> Iterator[np.ndarray]:
    """The file's symbols (code points, or bytes) chunk by chunk, as int64 arrays."""
    decoder = None
    if encoding != "bytes":
        try:
            codecs.lookup_error(errors)
            decoder = codecs.getincrementaldecoder(encoding)(errors)
        except LookupError as error:
            raise DataError(f"{path}: {error} (data.encoding is a Python codec or \"bytes\", data.errors "
                            "\"strict\", \"replace\" or \"ignore\")") from None
    offset = start = 0
    check_readable(path, DataError, "text file")
    try:
        with path.open("rb") as stream:
            while True:
                raw = stream.read(CHUNK_BYTES)
                if decoder is None:
                    if not raw:
                        return
                    yield np.frombuffer(raw, np.uint8).astype(np.int64)
                else:
                    start = offset - len(decoder.getstate()[0])  # the first byte held over from the last chunk
                    text = decoder.decode(raw, final=not raw)
                    yield np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32).astype(np.int64)
                    if not raw:
                        return
                offset += len(raw)
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: byte {start + error.start} is not valid {encoding} ({error.reason}); set "
                        "data.errors = \"replace\", or data.encoding = \"bytes\" to train on bytes") from None
    except OSError as error:
        raise DataError(f"{path}: cannot read it ({error.strerror or error})") from None


def describe_symbol(code: int, encoding: str) -> str:
    """A symbol as messages name it: ``'a' (U+0061)``, or ``byte 97``."""
    return f"byte {code}" if encoding == "bytes" else f"{chr(code)!r} (U+{code:04X})"


def build_vocabulary(path, encoding: str = "utf-8", errors: str = "strict", given: str | None = None) -> np.ndarray:
    """The sorted symbols (code points or bytes) the windows index: ``given``'s characters, else the file's."""
    path = Path(path)
    if given is not None:
        codes = sorted({ord(c) for c in given}) if encoding != "bytes" else sorted(set(given.encode("latin-1")))
        if not codes:
            raise DataError(f"{path}: data.vocabulary is empty")
        return np.array(codes, np.int64)
    seen = np.zeros(0, np.int64)
    for chunk in _symbols(path, encoding, errors):
        seen = np.union1d(seen, chunk)
    if not len(seen):
        raise DataError(f"{path}: the file is empty")
    return seen


def decode(indices, symbols: np.ndarray, encoding: str) -> str:
    """Text from vocabulary ``indices`` (bytes decoded as UTF-8, undecodable ones replaced)."""
    codes = symbols[np.asarray(indices, np.int64)]
    if encoding == "bytes":
        return bytes(codes.astype(np.uint8)).decode("utf-8", "replace")
    return "".join(map(chr, codes))


def encode(text: str, symbols: np.ndarray, encoding: str, what: str) -> np.ndarray:
    """Vocabulary indices of ``text``; a symbol outside the vocabulary is an error naming ``what``."""
    raw = text.encode("utf-8") if encoding == "bytes" else text.encode("utf-32-le", "surrogatepass")
    return _indices(np.frombuffer(raw, np.uint8 if encoding == "bytes" else np.uint32).astype(np.int64),
                    symbols, encoding, what, 0)


def _indices(codes: np.ndarray, symbols: np.ndarray, encoding: str, what: str, start: int) -> np.ndarray:
    positions = np.minimum(np.searchsorted(symbols, codes), len(symbols) - 1)
    unknown = symbols[positions] != codes
    if unknown.any():
        at = int(np.flatnonzero(unknown)[0])
        raise DataError(f"{what}: {describe_symbol(int(codes[at]), encoding)} at character {start + at} is not in the "
                        f"vocabulary of {len(symbols)} symbols")
    return positions.astype(np.uint8 if len(symbols) <= 256 else np.int32)


def chars(path, sequence: int = 50, stride: int | None = None, target: str = "sequence", vocabulary: str | None = None,
          encoding: str = "utf-8", errors: str = "strict") -> Windows:
    """Windows of ``sequence`` characters every ``stride`` (default: ``sequence``, no overlap); see the module."""
    path = Path(path)
    if sequence < 1 or (stride is not None and stride < 1):
        raise DataError(f"{path}: data.sequence and data.stride must be at least 1")
    if target not in ("sequence", "next"):
        raise DataError(f"{path}: data.target must be \"sequence\" or \"next\", got {target!r}")
    symbols = build_vocabulary(path, encoding, errors, vocabulary)
    stride = stride or sequence
    return Windows(_windows(path, symbols, sequence, stride, target == "next", encoding, errors),
                   derived={} if vocabulary is not None else {"vocabulary": symbols_text(symbols, encoding)})


def symbols_text(symbols: np.ndarray, encoding: str) -> str:
    """The symbols as ``data.vocabulary`` gives them to :func:`build_vocabulary` (bytes as Latin-1 characters)."""
    return bytes(symbols.astype(np.uint8)).decode("latin-1") if encoding == "bytes" else "".join(map(chr, symbols))


class Windows:
    """The windows' chunks, and the vocabulary found in the text as ``derived``: the run config records it
    (:attr:`sigma_core.Records.derived`), so a checkpoint knows its vocabulary when the text is gone."""

    def __init__(self, chunks: Iterator[dict[str, np.ndarray]], derived: dict):
        self.chunks, self.derived = chunks, derived

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self.chunks


def _windows(path, symbols, sequence, stride, next_only, encoding, errors):
    """The generator behind :func:`chars`, so that its argument errors come at once, not at the first chunk."""
    pending, start, produced = np.zeros(0, np.int64), 0, 0  # pending[0] is character ``start`` of the file
    for chunk in _symbols(path, encoding, errors):
        indices = _indices(chunk, symbols, encoding, str(path), start + len(pending))
        pending = np.concatenate([pending, indices]).astype(indices.dtype)
        count = max(0, (len(pending) - sequence - 1) // stride + 1)  # windows whose span + 1 is all here
        if count:
            spans = np.lib.stride_tricks.sliding_window_view(pending, sequence + 1)[: count * stride : stride].copy()
            # (N, sequence, 1): one class label per step (a trailing axis > 1 would read as one-hot rows)
            yield {"inputs": spans[:, :-1], "targets": spans[:, -1] if next_only else spans[:, 1:, None]}
            produced += count
            pending, start = pending[count * stride :], start + count * stride
    if not produced:
        length = start + len(pending)
        raise DataError(f"{path}: {length} characters, too few for one window of data.sequence = {sequence} "
                        "plus the character after it" if length else f"{path}: the file is empty")
