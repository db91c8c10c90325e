"""How much memory an allocation may ask for, checked before it is made: a layer of 10^9 units or a data file
claiming 10^12 elements is then one line naming the culprit and the bytes, not a process killed by the kernel."""

import contextlib
import os
import sys

from sigma_core.errors import SigmaError


def available() -> int:
    """Bytes a new allocation can get: the smaller of the host's available memory and the cgroup's headroom."""
    limits = []
    try:
        with open("/proc/meminfo") as meminfo:
            limits += [int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):  # not Linux
        with contextlib.suppress(ValueError, OSError, AttributeError):  # not POSIX either: no bound known
            limits.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    with contextlib.suppress(OSError, ValueError):  # no cgroup v2 limit ("max" is not a number)
        with open("/sys/fs/cgroup/memory.max") as limit, open("/sys/fs/cgroup/memory.current") as current:
            limits.append(int(limit.read()) - int(current.read()))
    return min(limits, default=sys.maxsize)


def require(nbytes: int, what: str, error: type[SigmaError] = SigmaError) -> None:
    """Raise ``error`` naming ``what`` when ``nbytes`` exceeds :func:`available`."""
    free = available()
    if nbytes > free:
        raise error(f"{what} need {nbytes:,} bytes, more than the {free:,} bytes of memory available")
