"""Seeded mutation fuzzing of a file loader (an extractor's reader): :func:`fuzz_loader`.

The loader reads a few hundred mutants of a valid file (bit flips,
truncations, insertions, deletions). Every outcome must be a success or a
``SigmaError`` whose message names the file, never another exception, and no
mutant may make the loader hold more memory at once than the file's size
justifies: a damaged file is one clear line, never a traceback or a huge
allocation.
"""

from __future__ import annotations

import random
import tracemalloc

from sigma_core import SigmaError

MUTANTS = 200
SLACK = 512 * 1024  # the interpreter's and the libraries' own working memory


def mutants(data: bytes, seed: int, count: int = MUTANTS):
    """``count`` corruptions of ``data``, each one to four edits, the same for a seed."""
    rng = random.Random(seed)
    for _ in range(count):
        mutant = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            edit, at = rng.randrange(4), rng.randrange(len(mutant) + 1)
            if edit == 0 and at < len(mutant):
                mutant[at] ^= 1 << rng.randrange(8)
            elif edit == 1:
                del mutant[at:]
            elif edit == 2:
                mutant[at:at] = rng.randbytes(rng.randint(1, 8))
            else:
                del mutant[at:at + rng.randint(1, 8)]
        yield bytes(mutant)


def fuzz_loader(path, data: bytes, load, seed: int, factor: float) -> dict:
    """Load every mutant of ``data`` written to ``path`` with ``load(path)``, holding at most ``factor`` times
    the mutant's size (plus :data:`SLACK`); return how many loaded and how many were refused."""
    outcomes = {"loaded": 0, "refused": 0}
    path.write_bytes(data)
    try:  # once unmeasured: what the first load imports (plugin discovery, a component's module) is no mutant's
        load(path)
    except SigmaError:
        pass
    for mutant in mutants(data, seed):
        path.write_bytes(mutant)
        tracemalloc.start()
        try:
            load(path)
            outcomes["loaded"] += 1
        except SigmaError as error:
            assert path.name in str(error), f"{error} does not name the file"
            outcomes["refused"] += 1
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        assert peak <= factor * len(mutant) + SLACK, f"{peak} bytes held for a {len(mutant)}-byte file"
    assert outcomes["refused"] >= MUTANTS // 4, outcomes  # the corruptions did reach the checks
    return outcomes
