"""The handler is the only thing that touches live data (issue 9, deliverable 2).

Layers, optimisers, hooks, the trainer and everything else in the core go
through handler ops; only the compute layer (handler, kernels, NDArray,
buffers, the bundled handlers) reads ``.data`` or a
handler's ``.kernels``. And the kernels are plain array code: importing them
loads neither the plugin system nor the optimisers.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "sigma_core"
COMPUTE_LAYER = {"compute"}  # sigma_core/compute/: the handler, its kernels and ops, arrays, buffers
RAW_ACCESS = re.compile(r"(?<!sigma_core)(?<!compute)\.(data|kernels)\b")  # sigma_core.data, compute.kernels: modules
PACKAGE_IMPORT = re.compile(r"from \.+data\b")  # the sigma_core.data package, imported relatively


def test_nothing_outside_the_compute_layer_reads_data_or_kernels():
    found = []
    for path in sorted(CORE.rglob("*.py")):
        if path.relative_to(CORE).parts[0] in COMPUTE_LAYER:
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if RAW_ACCESS.search(PACKAGE_IMPORT.sub("", line)):
                found.append(f"{path.relative_to(CORE.parent)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def test_importing_the_kernels_loads_neither_plugins_nor_optimisers():
    code = "import sys, sigma_core.compute.kernels; print(sorted(m for m in sys.modules if m.startswith('sigma_core')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "sigma_core.plugins" not in loaded and "sigma_core.training.optimisers" not in loaded, loaded
