"""Every Python example in docs/plugins.md runs as written: plugin modules installed as plugins, then their tests
(a test block that defines pytest tests, as the handler's conformance class does, runs under pytest)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


def test_every_guide_example_installs_and_passes_its_test(fake_site, tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S)
    plugins_, tests = [b for b in blocks if "@hookimpl" in b], [b for b in blocks if "@hookimpl" not in b]
    assert len(plugins_) >= 10 and len(tests) == len(plugins_)
    for index, source in enumerate(plugins_):
        fake_site.add(f"guide-example-{index}", entry_points={f"guide{index}": f"guide_example_{index}"},
                      modules={f"guide_example_{index}": source})
    for index, source in enumerate(tests):
        if re.search(r"^(def test_|class Test)", source, flags=re.M):
            (tmp_path / f"test_guide_{index}.py").write_text(source)
            result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                                     str(tmp_path / f"test_guide_{index}.py")], cwd=tmp_path, capture_output=True,
                                    text=True, env=fake_site.subprocess_env(), timeout=300)
            assert result.returncode == 0 and " passed" in result.stdout, result.stdout[-3000:] + result.stderr
        else:
            exec(compile(source, f"{GUIDE}:test{index}", "exec"), {})


def test_a_guide_layer_fits_the_line_budget():
    layer = next(b for b in re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S) if "register_layers" in b)
    assert len([line for line in layer.splitlines() if line.strip()]) <= 25


def test_the_guide_has_a_section_per_plugin_kind():
    assert re.findall(r"^## (.+)$", GUIDE.read_text(), flags=re.M) == [
        "Layer", "Activation", "Initialiser", "Hook", "Extractor", "Source, cache, reader and exporter", "Optimiser",
        "Operator", "Handler", "Op", "Step compiler", "CLI command"]


def test_the_guide_s_cpu_kernel_is_what_sigma_plugin_new_op_cpu_writes(tmp_path, capsys):
    """The guide shows the kernel rather than running it (it names the op ``sigma plugin new`` writes beside it);
    the scaffold's own tests install and run it, on the cpu handler too: the two must stay one text."""
    from sigma_core.cli import main

    assert main(["plugin", "new", "op", "gain_tanh", "--cpu", "--directory", str(tmp_path)]) == 0
    kernel = (tmp_path / "sigmann-gain-tanh" / "src" / "sigmann_gain_tanh" / "cpu.py").read_text()
    assert f"```py\n{kernel}```" in GUIDE.read_text()
