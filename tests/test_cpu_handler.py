"""The numba ``cpu`` handler (distribution ``sigmann-cpu``): conformance, selection, kernels, training.

Skipped as a whole when numba or the distribution is not installed, so the
core's suite runs without it. The first run compiles the kernels (tens of
seconds on two cores); numba's on-disk cache makes later runs fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy
import pytest

from sigma_core import NumpyHandler, cli, plugins

from sigma_core.compute import backend
from sigma_cpu import numba_cache
from sigma_cpu.handler import NumbaHandler
from sigma_cpu.kernels import NumbaKernels
from sigmann_testing import HandlerConformance


class TestNumbaHandlerConformance(HandlerConformance):
    handler_factory = NumbaHandler


# -- registration and selection --------------------------------------------------------------
def test_plugins_lists_cpu_as_available(capsys):
    assert cli.main(["plugins", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out) if row["kind"] == "handler"}
    assert rows["cpu"]["available"] and rows["cpu"]["distribution"] == "sigmann-cpu"
    assert rows["cpu"]["rank"] > rows["numpy"]["rank"]


def test_auto_selects_cpu_and_names_select_it():
    assert isinstance(backend.create_handler("auto"), NumbaHandler)
    assert isinstance(backend.create_handler("cpu", dtype="float64"), NumbaHandler)


def test_importing_the_plugin_does_not_import_numba():
    import subprocess
    import sys

    code = "import sys, sigma_cpu.plugin; print('numba' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


# -- the numba cache directory -------------------------------------------------------------------
def test_cache_dir_precedence():
    choose = numba_cache.choose_cache_dir
    assert choose({"SIGMA_NUMBA_CACHE_DIR": "/x", "NUMBA_CACHE_DIR": "/y"}, package_writable=True) == "/x"
    assert choose({"NUMBA_CACHE_DIR": "/y"}, package_writable=False) is None  # numba's own setting stands
    assert choose({}, package_writable=True) is None  # numba's default: next to the kernels
    fallback = choose({}, package_writable=False)
    assert fallback.endswith("numba") and "sigmann" in fallback


# -- dropout: a counter-based generator ---------------------------------------------------------------
def _dropout_masks(handler, calls=3):
    x = handler.ones((64, 50))
    return [handler.dropout(x, 0.4).to_numpy() for _ in range(calls)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_column_sums_and_label_range_give_the_reference_bits(dtype):
    """The compiled axis-0 sum adds in NumPy's order, so bias gradients keep their bits."""
    rng = numpy.random.default_rng(0)
    ours, reference = NumbaKernels(dtype), NumpyHandler(dtype).kernels
    for shape in [(100, 128), (100, 10), (100, 1000), (3, 7), (1, 4)]:
        x = (rng.standard_normal(shape) * 50).astype(dtype)
        numpy.testing.assert_array_equal(ours.sum(x, axis=0), reference.sum(x, axis=0))
    labels = rng.integers(-3, 20, 50)
    assert ours.label_range(labels) == reference.label_range(labels) == (int(labels.min()), int(labels.max()))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_dense_backward_pass_gives_the_reference_gradient_and_bias_gradient_on_any_split(dtype):
    """``activation_backward_sum`` is one compiled pass (column blocks, one per thread): relu's select and the
    column sums keep the reference's bits whatever the split; sigmoid and tanh differ from NumPy's passes only by
    the rounding of f'(y) (one float64 intermediate), so within a few ulps, and their sums by that times the rows."""
    from sigma_cpu import kernels

    rng = numpy.random.default_rng(1)
    ours, reference = NumbaKernels(dtype), NumpyHandler(dtype).kernels
    eps = numpy.finfo(dtype).eps
    for shape in [(100, 1000), (100, 128), (3, 7), (1, 40)]:
        g = (rng.standard_normal(shape) * 3).astype(dtype)
        for name in ("relu", "sigmoid", "tanh", "none"):
            y = (rng.standard_normal(shape) if name == "relu" else rng.uniform(-0.99, 0.99, shape)).astype(dtype)
            gz, gb = ours.activation_backward_sum(name, g, y, True)
            want_gz, want_gb = reference.activation_backward_sum(name, g, y, True)
            if name in ("relu", "none"):
                numpy.testing.assert_array_equal(gz, want_gz)
                numpy.testing.assert_array_equal(gb, want_gb)
            else:
                numpy.testing.assert_allclose(gz, want_gz, rtol=4 * eps, atol=4 * eps * numpy.abs(g).max())
                numpy.testing.assert_allclose(gb, want_gb, rtol=0, atol=4 * eps * shape[0] * numpy.abs(g).max())
            assert ours.activation_backward_sum(name, g, y, False)[1] is None
            if name != "none":  # every split of the columns between threads gives the same bits
                for parts in (2, 3):
                    out, sums = numpy.empty_like(g), numpy.empty(shape[1], dtype)
                    kernels._activation_backward_sums[1](g, y, out, sums, kernels.ACTIVATION_CODES[name], parts)
                    numpy.testing.assert_array_equal(out, gz)
                    numpy.testing.assert_array_equal(sums, gb)


def test_dropout_is_reproducible_from_the_seed_and_the_rng_state():
    first, again, other = (_dropout_masks(NumbaHandler("float32", seed=s)) for s in (5, 5, 6))
    for a, b, c in zip(first, again, other):
        numpy.testing.assert_array_equal(a, b)
        assert not numpy.array_equal(a, c)
    assert not numpy.array_equal(first[0], first[1])  # each call draws afresh
    h = NumbaHandler("float32", seed=5)
    h.dropout(h.ones((3,)), 0.5)
    state = json.loads(json.dumps(h.rng_state()))  # checkpoints store it as JSON
    after = _dropout_masks(h)
    h.set_rng_state(state)
    for a, b in zip(after, _dropout_masks(h)):
        numpy.testing.assert_array_equal(a, b)


def test_dropout_keeps_the_expected_fraction():
    h = NumbaHandler("float64", seed=1)
    mask = h.dropout(h.ones((400, 500)), 0.3)
    kept = mask.to_numpy() != 0
    assert abs(kept.mean() - 0.7) < 0.005  # 200,000 draws: standard error 0.001
    numpy.testing.assert_allclose(mask.to_numpy()[kept], 1 / 0.7)


# -- training --------------------------------------------------------------------------------------------
def _mlp_trainer(handler, dropout=True):
    from sigma_core.model.constructs import Dense, Dropout, Input, SoftmaxCE
    from sigma_core.model.network import Network
    from sigmann_optimisers import Adagrad
    from sigma_core.training.trainer import Trainer

    layers = Input(200)
    if dropout:
        layers = layers + Dropout(0.2)
    network = Network(layers + Dense(300, "relu") + Dense(10, "sigmoid") + SoftmaxCE())
    trainer = Trainer(network, Adagrad(0.02), training_iterator=[])
    trainer.initialise(handler)
    return trainer


def test_training_steps_allocate_nothing_after_warm_up():
    h = NumbaHandler("float32", seed=0)
    trainer = _mlp_trainer(h)
    rng = numpy.random.default_rng(0)
    batch = {"inputs": rng.random((100, 200), dtype=numpy.float32), "targets": rng.integers(0, 10, 100)}
    trainer.run_iteration(batch)
    warm = h.allocations
    for _ in range(3):
        trainer.run_iteration(batch)
    assert h.allocations == warm, f"{h.allocations - warm} new buffers after the warm-up step"


@pytest.mark.slow
def test_training_digits_matches_the_numpy_handler(tmp_path):
    accuracy = {}
    for name in ("numpy", "cpu"):
        out = tmp_path / f"{name}.json"
        assert cli.main(["train", "examples/digits.toml", "--handler", name, "--quiet", "--out", str(out)]) == 0
        summary = json.loads(out.read_text())
        assert summary["handler"] == name
        accuracy[name] = summary["accuracy"]
    assert accuracy["cpu"] > 0.9
    assert abs(accuracy["cpu"] - accuracy["numpy"]) <= 0.02, accuracy


def test_without_the_cpu_plugin_the_core_still_trains_and_names_the_missing_handler(monkeypatch, tmp_path, capsys):
    """As if sigmann-cpu were uninstalled: built-ins only, numpy trains, asking for cpu is one clear error."""
    monkeypatch.setenv("SIGMA_PLUGINS", "")
    plugins.reset()
    assert "cpu" not in [c.name for c in plugins.components("handler")]
    config = str(Path(__file__).resolve().parents[1] / "examples" / "xor.toml")
    assert cli.main(["train", config, "--quiet", "--out", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["handler"] == "numpy"
    capsys.readouterr()
    assert cli.main(["train", config, "--quiet", "--handler", "cpu"]) == 2
    assert "unknown handler 'cpu' (available: numpy)" in capsys.readouterr().err


# -- the shared thread pool (sigma_cpu.blas_pool) -------------------------------------------------------
_POOL_RUN = """
import numpy
from sigma_cpu import blas_pool
from sigma_core.model.constructs import Dense, Dropout, Input, SoftmaxCE
from sigma_core.model.network import Network
from sigma_core.training.trainer import Trainer
from sigma_cpu.handler import NumbaHandler
from sigmann_optimisers import Adagrad
network = Network(Input(784) + Dropout(0.2) + Dense(1000, "relu") + Dense(800, "relu") + Dense(10) + SoftmaxCE())
trainer = Trainer(network, Adagrad(0.02), training_iterator=[])
trainer.initialise(NumbaHandler("float32", seed=0))
rng = numpy.random.default_rng(0)
batches = [{"inputs": rng.random((100, 784), dtype=numpy.float32), "targets": rng.integers(0, 10, 100)} for _ in range(4)]
costs = [float(trainer.run_iteration(batch)).hex() for batch in batches]
digest = sum(float(numpy.abs(a).astype(numpy.float64).sum()) for a in trainer.network.state_dict().values())
print(blas_pool.PARALLEL, costs, digest.hex())
"""


def test_the_shared_pool_changes_no_bits(tmp_path):
    """Training with BLAS on numba's pool and parallel kernels gives the same bits as with neither."""
    import os
    import subprocess
    import sys

    results = {}
    for setting in ("1", "0"):
        env = dict(os.environ, SIGMA_CPU_SHARED_POOL=setting)
        run = subprocess.run([sys.executable, "-c", _POOL_RUN], env=env, capture_output=True, text=True, check=True)
        parallel, output = run.stdout.strip().split(" ", 1)
        results[setting] = output
        if setting == "0":
            assert parallel == "False"
    assert results["1"] == results["0"]


def test_kernels_release_the_gil_and_keep_to_one_thread_when_blas_is_limited_to_one():
    """Data-parallel workers limit BLAS to one thread each; their kernels must not then start a pool of their own."""
    from threadpoolctl import threadpool_limits

    from sigma_cpu import blas_pool, kernels
    from sigma_cpu.handler import NumbaHandler

    NumbaHandler("float32")  # installs the shared pool
    assert blas_pool.PARALLEL, blas_pool.describe()
    assert all(compiled.targetoptions.get("nogil") for compiled in (*kernels._adam, kernels._column_sums))
    with threadpool_limits(2, user_api="blas"):
        assert blas_pool.threads() == 2 and kernels._pick(kernels._adam, 1 << 20) is kernels._adam[1]
        assert kernels._pick(kernels._adam, 100) is kernels._adam[0]
        with threadpool_limits(1, user_api="blas"):
            assert blas_pool.threads() == 1 and kernels._pick(kernels._adam, 1 << 20) is kernels._adam[0]


def test_the_shared_pool_installs_after_builtins_print_was_replaced():
    """``ray.init`` replaces ``builtins.print`` with a Python function, which numba cannot compile into the
    callback (numba's get_num_threads prints on an error path): a handler created after it failed to build."""
    import subprocess
    import sys

    script = ("from sigma_cpu import blas_pool\nfrom sigma_cpu.handler import NumbaHandler\n"
              "import builtins; builtins.print = lambda *a, **k: None\n"
              "NumbaHandler('float32'); import sys; sys.stdout.write(f'{blas_pool.PARALLEL} {blas_pool.describe()}')")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "True BLAS runs on numba's omp pool"


def test_the_blas_callback_is_loaded_from_the_disk_cache_in_later_processes(tmp_path):
    """Compiling the callback took ~0.5 s in every process (issue 28): it must be cached like the kernels."""
    import os
    import subprocess
    import sys

    script = ("from sigma_cpu import blas_pool\nfrom sigma_cpu.handler import NumbaHandler\n"
              "NumbaHandler('float32'); import sys; sys.stderr.write(f'installed: {blas_pool.PARALLEL}')")
    env = dict(os.environ, SIGMA_NUMBA_CACHE_DIR=str(tmp_path), NUMBA_DEBUG_CACHE="1", SIGMA_CPU_PRECOMPILE="0")
    logs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stderr.endswith("installed: True"), done.stderr[-2000:]
        logs.append(done.stdout + done.stderr)
    assert any("data saved to" in line and "blas_pool._callback-" in line for line in logs[0].splitlines())
    assert any("data loaded from" in line and "blas_pool._callback-" in line for line in logs[1].splitlines())
    assert "saved to" not in logs[1], logs[1][-2000:]  # nothing compiled (_run_jobs comes linked into the callback)


_LEAN_RUN = """
import numpy
from numba.core import base
refreshes = []
refresh = base.BaseContext.refresh
base.BaseContext.refresh = lambda self: (refreshes.append(1), refresh(self))[1]
from sigma_core.model.constructs import Dense, Dropout, Input, SoftmaxCE
from sigma_core.model.network import Network
from sigma_core.training.optimisers import Adam
from sigma_core.training.trainer import Trainer
from sigma_cpu.handler import NumbaHandler
network = Network(Input(64) + Dense(32, "relu") + Dropout(0.1) + Dense(10) + SoftmaxCE())
trainer = Trainer(network, Adam(0.003), training_iterator=[])
trainer.initialise(NumbaHandler("float32", seed=0))
rng = numpy.random.default_rng(0)
batches = [{"inputs": rng.random((32, 64), dtype=numpy.float32), "targets": rng.integers(0, 10, 32)} for _ in range(3)]
costs = [float(trainer.run_iteration(batch)).hex() for batch in batches]
print(len(refreshes), costs)
"""


def test_a_warm_process_loads_the_kernels_without_refreshing_numbas_registries(tmp_path):
    """numba refreshes its typing and lowering registries (~250 modules, 0.25 s) before loading cached machine
    code, which needs only its runtime (issue 28): a process with a warm cache must not, and compute the same."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, SIGMA_NUMBA_CACHE_DIR=str(tmp_path), SIGMA_CPU_PRECOMPILE="0")
    outputs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", _LEAN_RUN], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        refreshes, costs = done.stdout.strip().split(" ", 1)
        outputs.append((int(refreshes), costs))
    assert outputs[0][0] > 0  # the first process compiled, which refreshes
    assert outputs[1][0] == 0, "a process with a warm cache refreshed numba's registries"
    assert outputs[1][1] == outputs[0][1]


def test_the_first_process_on_a_machine_has_a_helper_fill_the_cache_and_later_ones_compile_nothing(tmp_path):
    """The first run compiles what it needs first while a helper process compiles the rest (issue 28: a cold cache
    added ~2 s). Once the helper is done, a process using kernels the first did not (SGD with weight decay)
    compiles nothing, starts no helper, and computes what it computes compiling them itself."""
    import os
    import subprocess
    import sys

    from sigma_cpu import wait_for_precompile

    def run(script, cache, **settings):
        env = dict(os.environ, SIGMA_NUMBA_CACHE_DIR=str(cache), NUMBA_DEBUG_CACHE="1", **settings)
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert wait_for_precompile(cache, timeout=240), "the helper did not finish"
        return done.stdout.strip().splitlines()

    started = "from sigma_cpu import precompile\nprint(precompile.start('float32'))\n"
    sgd = _LEAN_RUN.replace("Adam(0.003)", "GradientDescent(0.05, weight_decay=1e-4)").replace(
        "import Adam", "import GradientDescent")
    first = run(_LEAN_RUN + started, tmp_path / "shared", SIGMA_CPU_PRECOMPILE="1")
    assert first[-1] == "False"  # the handler had started the helper, which held the lock
    stamps = [path.name for path in (tmp_path / "shared").glob("sigma-cpu-precompiled-float32-*")]
    assert len(stamps) == 1 and not stamps[0].endswith(".lock"), stamps
    assert any((tmp_path / "shared").rglob("*_adam_parallel*.nbi"))  # the parallel twins too
    later = run(sgd + started, tmp_path / "shared", SIGMA_CPU_PRECOMPILE="1")
    assert not any("data saved to" in line for line in later), "a process after the helper compiled a kernel"
    assert later[-1] == "False"  # the stamp is there: no helper
    alone = run(sgd, tmp_path / "alone", SIGMA_CPU_PRECOMPILE="0")
    assert any("data saved to" in line for line in alone)
    assert later[-2].split(" ", 1)[1] == alone[-1].split(" ", 1)[1]  # the costs


def test_no_helper_starts_when_precompiling_is_turned_off(tmp_path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, SIGMA_NUMBA_CACHE_DIR=str(tmp_path), SIGMA_CPU_PRECOMPILE="0")
    script = "from sigma_cpu import precompile\nprint(precompile.start('float32'))"
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr[-2000:]
    assert not list(tmp_path.glob("sigma-cpu-precompiled-*"))


@pytest.mark.parametrize("program_froze", [False, True])
def test_numba_is_imported_with_the_heap_frozen_and_the_programs_own_freeze_stands(program_froze):
    """Freezing the heap while numba imports saves ~60 ms of garbage collection (issue 28); afterwards nothing
    may stay frozen that the program did not freeze itself, and what it froze stays frozen."""
    import subprocess
    import sys

    script = ("import gc, json\nfrozen = []\nif %r:\n    frozen = [object() for _ in range(3)]\n    gc.freeze()\n"
              "before = gc.get_freeze_count()\nfrom sigma_cpu import numba_cache\nrecorded = []\n"
              "real = gc.freeze\ngc.freeze = lambda: (recorded.append(gc.get_freeze_count()), real())[1]\n"
              "numba = numba_cache.import_numba()\n"
              "print(json.dumps([before, gc.get_freeze_count(), len(recorded), 'numba' in dir()]))") % program_froze
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    before, after, freezes, imported = json.loads(done.stdout)
    assert imported and freezes == (0 if program_froze else 1)
    if program_froze:  # still frozen (the count itself moves a little as objects are untracked and tracked again)
        assert after > before // 2 > 0
    else:
        assert after == 0


def test_a_helper_that_fails_still_writes_its_stamp_and_frees_its_lock(tmp_path):
    """A helper failing once would fail in every later run too: it must not be started again and again."""
    from sigma_cpu import precompile

    stamp = tmp_path / "sigma-cpu-precompiled-nonsense-0"
    assert precompile._take_lock(stamp)
    with pytest.raises(TypeError):
        precompile.main(["nonsense", str(stamp)])
    assert stamp.exists() and not list(tmp_path.glob("*.lock"))
    assert precompile.wait(tmp_path, timeout=0)
