"""The pytest plugin loads in every pytest session of the environment: loading it must import neither Sigma nor the kit."""

import subprocess
import sys


def test_loading_the_plugin_imports_neither_sigma_nor_numpy():
    code = ("import sys, sigmann_testing.plugin; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sigma_core', 'numpy') "
            "or m.startswith('sigmann_testing.') and m != 'sigmann_testing.plugin'))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded == "[]\n"


def test_every_module_the_kit_imports_is_a_declared_dependency():
    """A plugin author installs the kit alone (``test = ["sigmann-testing"]``): what its code imports (pytest for
    the fixtures and the conformance class, numpy, sigma_core) must come with it."""
    import ast
    import re
    from importlib import metadata
    from pathlib import Path

    import sigmann_testing

    imported = set()
    for path in Path(sigmann_testing.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"sigmann_testing", "__future__"}
    providers = metadata.packages_distributions()
    needed = {re.sub(r"[-_.]+", "-", providers[module][0]).lower() for module in third_party}
    declared = {re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", requirement).group()).lower()
                for requirement in metadata.requires("sigmann-testing") or () if "extra ==" not in requirement}
    assert {"pytest", "numpy", "sigmann"} <= needed
    assert needed <= declared, f"imported but not declared: {sorted(needed - declared)}"


def test_sigma_run_file_writes_the_blobs_run_with_the_changes_asked_for(sigma_run_file):
    import tomllib

    from sigma_core import validate_run

    path = sigma_run_file("optimiser.type=adam", "network.layers.1.size=4")
    config = validate_run(tomllib.loads(path.read_text()), str(path))
    assert config["optimiser"]["type"] == "adam" and config["network"]["layers"][1]["size"] == 4
    assert config["training"]["epochs"] == 2 and config["name"] == "blobs"  # the rest as BLOBS_RUN_FILE has it
