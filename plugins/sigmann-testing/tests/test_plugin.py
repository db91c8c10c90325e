"""The pytest plugin loads in every pytest session of the environment: loading it must import neither Sigma nor the kit."""

import subprocess
import sys


def test_loading_the_plugin_imports_neither_sigma_nor_numpy():
    code = ("import sys, sigmann_testing.plugin; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sigma_core', 'numpy') "
            "or m.startswith('sigmann_testing.') and m != 'sigmann_testing.plugin'))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded == "[]\n"
