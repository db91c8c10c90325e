"""Every Python example in docs/plugins.md runs as written: plugin modules installed as plugins, then their tests."""

from __future__ import annotations

import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


def test_every_guide_example_installs_and_passes_its_test(fake_site):
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S)
    plugins_, tests = [b for b in blocks if "@hookimpl" in b], [b for b in blocks if "@hookimpl" not in b]
    assert len(plugins_) >= 3 and len(tests) == len(plugins_)
    for index, source in enumerate(plugins_):
        fake_site.add(f"guide-example-{index}", entry_points={f"guide{index}": f"guide_example_{index}"},
                      modules={f"guide_example_{index}": source})
    for index, source in enumerate(tests):
        exec(compile(source, f"{GUIDE}:test{index}", "exec"), {})


def test_a_guide_layer_fits_the_line_budget():
    layer = next(b for b in re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S) if "register_layers" in b)
    assert len([line for line in layer.splitlines() if line.strip()]) <= 25
