"""The Python side of ``gpu_check.sh``: what to install, the checks before the tests, the count, the figures.

Each subcommand is one step of the shell script, so that the script cannot pass where nothing ran:

* ``distributions``: the repository folders to install, read from the imports of the GPU tests and
  ``gpu_profile.py`` (function-level imports included), plus :data:`BY_NAME` (plugins the tests use by
  name, never by import), plus what those depend on (their ``pyproject.toml``); standard library only.
* ``preflight OUT``: ``import cupy``, every installed distribution's module and every module the GPU
  tests and ``gpu_profile.py`` import from them, the ``cuda`` handler's availability; the first failure
  is one line on stderr and exit status 1. Tests that need what is optional here (the MNIST files, sigmann-data's download libraries) are written to ``OUT/deselect.txt``
  with the reason, so they are left out by name, never skipped silently.
* ``count OUT TESTS [PYTEST ARGS]``: collects ``TESTS`` as the run did (its extra arguments, e.g. ``-k``;
  minus the deselected), then reads ``OUT/junit.xml``: exit status 1 unless every collected test ran
  (none skipped) and none failed.
* ``replay-status OUT``: for each GPU benchmark workload, whether sigma-cuda's steps are replayed as
  CUDA graphs (``OUT/replay.json``): a bench row of unrecorded steps must not pass for a replayed one.
* ``figures OUT``: ``OUT/gpu_figures.txt``, every figure the part measured in one file.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The files whose imports say what the device run needs (``sigma bench`` is sigmann-bench's: gpu_profile imports it).
IMPORTERS = ("sigma_cuda/tests/test_cuda_gpu.py", "sigma_cuda/gpu_profile.py")
#: Distributions the GPU tests need without importing them: components looked up by name through the registry.
BY_NAME = {
    "plugins/sigmann-recurrent": "the 'recurrent' and 'lstm' layers test_cuda_gpu.py checks",
    "plugins/sigmann-vision": "convolution, pooling and normalisation ops: the conformance kit covers each registered op",
    "plugins/sigmann-sklearn": "the digits dataset of examples/digits.toml",
    "plugins/sigmann-mnist": "the mnist extractor of examples/mnist.toml",
}
#: Tests left out by name when what they need is missing on the device: test -> (module to import, MNIST files?).
OPTIONAL = {"test_mnist_example_reaches_95_percent_on_cuda": ("sigmann_mnist.mnist", True)}
GPU_TESTS = "sigma_cuda/tests/test_cuda_gpu.py"


def folder(module: str) -> str | None:
    """The repository folder of the distribution that provides top-level ``module``, or None (not Sigma's)."""
    if module == "sigma_core":
        return "."
    if module in ("sigma_cpu", "sigma_cuda"):
        return module
    if module.startswith("sigmann_") and (ROOT / "plugins" / module.replace("_", "-")).is_dir():
        return "plugins/" + module.replace("_", "-")
    return None


def imported_modules(path: Path) -> set[str]:
    """The modules ``path`` imports (dotted names), anywhere in it (inside functions too)."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            modules.add(node.module)
    return modules


def sigma_imports() -> list[str]:
    """The modules of Sigma's distributions that the files of :data:`IMPORTERS` import."""
    return sorted({m for path in IMPORTERS for m in imported_modules(ROOT / path) if folder(m.split(".")[0])})


def dependencies(directory: str) -> list[str]:
    """The repository folders ``directory``'s distribution depends on (its required ``sigmann*`` dependencies)."""
    project = tomllib.loads((ROOT / directory / "pyproject.toml").read_text())["project"]
    found = []
    for requirement in project.get("dependencies", []):
        name = requirement.split(";")[0].split("[")[0].strip()
        for separator in "<>=!~ ":
            name = name.split(separator)[0]
        if name == "sigmann":
            found.append(".")
        elif name.startswith("sigmann-"):
            found.append(f"plugins/{name}" if (ROOT / "plugins" / name).is_dir() else name.replace("sigmann-", "sigma_"))
    return found


def distributions() -> list[str]:
    """Every folder to install (the core first): see the module docstring."""
    wanted = {folder(m.split(".")[0]) for m in sigma_imports()}
    wanted |= set(BY_NAME)
    pending = list(wanted)
    while pending:
        for directory in dependencies(pending.pop()):
            if directory not in wanted:
                wanted.add(directory)
                pending.append(directory)
    return sorted(wanted, key=lambda d: (d != ".", d))


def module_of(directory: str) -> str:
    return "sigma_core" if directory == "." else Path(directory).name.replace("-", "_")


def stop(message: str) -> None:
    print(f"GPU CHECK STOPPED: {message}", file=sys.stderr)
    sys.exit(1)


def mnist_files() -> Path | None:
    """Where test_cuda_gpu.py looks for the MNIST files (its MNIST constant), if they are there."""
    import os

    for candidate in (os.environ.get("SIGMA_MNIST_DIR"), ROOT / ".gpu_data" / "mnist", ROOT.parent / "shared" / "data" / "mnist"):
        if candidate and Path(candidate).exists():
            return Path(candidate)
    return None


def preflight(out: Path) -> None:
    """Stop at the first thing that would make the GPU tests skip or fail to load; name what is left out."""
    import importlib

    try:
        import cupy

        print(f"cupy {cupy.__version__}: {cupy.cuda.runtime.getDeviceCount()} device(s), "
              f"CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}")
    except Exception as error:  # noqa: BLE001 (any failure here is the one line)
        stop(f"import cupy failed: {type(error).__name__}: {error}")
    for module in [module_of(directory) for directory in distributions()] + sigma_imports():
        try:
            importlib.import_module(module)
        except Exception as error:  # noqa: BLE001
            stop(f"import {module} failed: {type(error).__name__}: {error}")
    from sigma_core import handler_availability

    available, reason = handler_availability("cuda")
    if not available:
        stop(f"the cuda handler is unavailable: {reason}")
    left_out = []
    for test, (module, needs_mnist) in OPTIONAL.items():
        try:
            importlib.import_module(module)
        except Exception as error:  # noqa: BLE001
            left_out.append(f"{test}\t{module} cannot be imported ({type(error).__name__}: {error})")
            continue
        if needs_mnist and mnist_files() is None:
            left_out.append(f"{test}\tno MNIST files (SIGMA_MNIST_DIR, .gpu_data/mnist or ../shared/data/mnist)")
    (out / "deselect.txt").write_text("".join(line + "\n" for line in left_out))
    for line in left_out:
        print("left out: " + line.replace("\t", ": "))
    print("preflight: cupy, every distribution and the cuda handler are there")


def left_out(out: Path) -> list[tuple[str, str]]:
    """``(test, why)`` for each test preflight left out (``OUT/deselect.txt``)."""
    path = out / "deselect.txt"
    return [tuple(line.split("\t", 1)) for line in path.read_text().splitlines()] if path.exists() else []


def collect(tests: str, out: Path, extra=()) -> list[str]:
    """The ids pytest collects from ``tests`` with ``extra`` arguments, less the deselected ones; a collection
    error stops the check."""
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", tests,
                             *extra], capture_output=True, text=True, cwd=ROOT)
    if result.returncode != 0:
        stop(f"collecting {tests} failed (pytest exit {result.returncode}): "
             + next((line for line in result.stdout.splitlines() if "Error" in line), result.stdout[-300:]))
    skipped = [test for test, _ in left_out(out)]
    return [line for line in result.stdout.splitlines()
            if "::" in line and not any(f"::{name}" in line for name in skipped)]


def junit_cases(path: Path) -> list[tuple[str, str]]:
    """``(test id, outcome)`` for each test case of a JUnit XML report: passed, failed, error or skipped."""
    cases = []
    for case in ElementTree.parse(path).iter("testcase"):
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        cases.append((f"{case.get('classname')}::{case.get('name')}", {"failure": "failed"}.get(outcome, outcome)))
    return cases


def count(out: Path, tests: str, extra=()) -> int:
    """0 if every collected test ran and passed; else 1, with the reason in one line."""
    expected = len(collect(tests, out, extra))
    junit = out / "junit.xml"
    if not junit.exists():
        print(f"GPU CHECK FAILED: no JUnit report: pytest did not finish ({expected} tests expected)")
        return 1
    outcomes = [outcome for _, outcome in junit_cases(junit)]
    ran = len(outcomes) - outcomes.count("skipped")
    bad = outcomes.count("failed") + outcomes.count("error")
    print(f"GPU tests: {ran} of {expected} expected ran; {outcomes.count('passed')} passed, {bad} failed or errors, "
          f"{outcomes.count('skipped')} skipped")
    if ran < expected:
        print(f"GPU CHECK FAILED: only {ran} of the {expected} expected GPU tests ran")
        return 1
    return 1 if bad else 0


def replay_status(out: Path, steps: int = 5) -> None:
    """Whether each GPU benchmark workload's sigma-cuda steps are replayed, built as ``sigma bench`` builds them."""
    import cupy
    from sigmann_bench.bench import WORKLOADS, build_trainer
    from sigmann_bench.gpu import GPU_WORKLOADS, make_batches
    from sigmann_replay import StepReplay

    status = {}
    for workload, (spec, batch) in GPU_WORKLOADS.items():
        trainer = build_trainer(dict(WORKLOADS[spec], name=workload), "cuda", replay=True)
        batches = [trainer.handler.pin_batch(b) for b in make_batches(batch, n=2)]
        for i in range(steps):
            trainer.run_iteration(batches[i % 2])
        cupy.cuda.Device().synchronize()
        replay = StepReplay.of(trainer)
        reasons = [entry for entry in replay.cache.values() if isinstance(entry, str)] if replay else ["no StepReplay"]
        status[workload] = {"replayed": replay.replayed if replay else 0, "steps": steps,
                            "reason": reasons[0] if reasons else ""}
        print(f"{workload}: {status[workload]['replayed']} of {steps} steps replayed as CUDA graphs"
              + (f" (not replayed: {status[workload]['reason']})" if reasons else ""))
    (out / "replay.json").write_text(json.dumps(status, indent=1))


def replayed_column(record: dict, status: dict) -> str:
    """A bench row's 'replayed' cell: whether that row timed graph replays."""
    if record["system"] == "sigma-cuda-unrecorded":
        return "off"
    if record["system"] != "sigma-cuda":
        return "-"
    known = status.get(record["workload"])
    if known is None:
        return "unknown"
    return "yes" if known["replayed"] else f"NO: {known['reason'] or 'not replayed'}"


def figures(out: Path) -> str:
    """Every figure this part wrote in ``out``, as the text of ``gpu_figures.txt``."""
    lines = []
    if (out / "junit.xml").exists():
        cases = junit_cases(out / "junit.xml")
        lines.append("== GPU tests (sigma_cuda/tests/test_cuda_gpu.py, serial)")
        lines += [f"{outcome:8} {test}" for test, outcome in cases if outcome != "passed"]
        lines.append("== handler conformance kit on cuda (passed/failed per dtype)")
        for dtype in ("float32", "float64"):
            mine = [outcome for test, outcome in cases if "Conformance" in test and dtype in test]
            lines.append(f"{dtype}: {mine.count('passed')} passed, {len(mine) - mine.count('passed')} not")
    lines += [f"left out: {test}: {why}" for test, why in left_out(out)]
    status = json.loads((out / "replay.json").read_text()) if (out / "replay.json").exists() else {}
    if status:
        lines.append("== replay of sigma-cuda's steps (as sigma bench builds them)")
        lines += [f"{w}: {s['replayed']} of {s['steps']} steps replayed {s['reason']}".rstrip() for w, s in status.items()]
    if (out / "profile.txt").exists():
        lines.append("== gpu_profile.py")
        lines += [line for line in (out / "profile.txt").read_text().splitlines() if line.startswith(("device", "sigma-mlp"))]
    if (out / "bench.json").exists():
        lines.append("== sigma bench --handlers cuda")
        try:
            records = json.loads((out / "bench.json").read_text())
        except ValueError:
            records = []
            lines.append("no results: bench.json is not JSON (see gpu_check.log)")
        lines.append(f"{'workload':<14}{'system':<24}{'batch':>6}{'ms/iter':>10}{'samples/s':>12}{'vs sigma':>10}  replayed")
        for r in records:
            if r.get("measure") == "iteration":
                lines.append(f"{r['workload']:<14}{r['system']:<24}{r['batch']:>6}{r['median_ms']:>10.3f}"
                             f"{r['samples_per_s']:>12.0f}{r['ratio_to_ours']:>9.2f}x  {replayed_column(r, status)}")
            else:
                lines.append(f"{r['workload']:<14}{r['system']:<24}{r['measure']}: {r['median_ms']} ms")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    command, *args = argv or ["help"]
    if command == "distributions":
        print(" ".join(distributions()))
    elif command == "preflight":
        preflight(Path(args[0]))
    elif command == "count":
        return count(Path(args[0]), args[1], args[2:])
    elif command == "replay-status":
        replay_status(Path(args[0]))
    elif command == "figures":
        text = figures(Path(args[0]))
        (Path(args[0]) / "gpu_figures.txt").write_text(text)
        print(text, end="")
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
