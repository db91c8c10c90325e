"""Where the ``cpu`` handler's matrix products come from (:mod:`sigma_cpu.blas`): the choice, and oneMKL's numbers.

The choice is tested everywhere; the oneMKL products only where the ``mkl``
wheel is installed (``pip install ./sigma_cpu[mkl]``; CI installs it for its
second run of the numeric tests), except the error for asking for it without.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy
import pytest

from sigma_core import SigmaError, cli
from sigma_cpu import blas

XOR = str(Path(__file__).resolve().parents[1] / "examples" / "xor.toml")
needs_mkl = pytest.mark.skipif(blas.mkl_library() is None, reason="the mkl wheel is not installed (sigma_cpu[mkl])")


# -- the choice ---------------------------------------------------------------------------------------
def test_the_variable_forces_a_provider_and_auto_prefers_mkl_where_installed_on_intel(monkeypatch):
    monkeypatch.setattr(blas, "mkl_library", lambda: Path("/opt/libmkl_rt.so.3"))
    monkeypatch.setattr(blas, "cpu_vendor", lambda: "GenuineIntel")
    assert blas.choose({}) == blas.choose({"SIGMA_CPU_BLAS": "auto"}) == "mkl"
    assert blas.choose({"SIGMA_CPU_BLAS": "OpenBLAS"}) == "openblas"
    for vendor in ("AuthenticAMD", ""):  # oneMKL's generic path: auto keeps OpenBLAS, the variable still forces
        monkeypatch.setattr(blas, "cpu_vendor", lambda: vendor)
        assert blas.choose({}) == "openblas" and blas.choose({"SIGMA_CPU_BLAS": "mkl"}) == "mkl"
        assert blas.summary({}) == (f"BLAS: openblas (oneMKL installed, not chosen on this {vendor or 'non-Intel'} "
                                    f"CPU; SIGMA_CPU_BLAS=mkl forces it)")
    monkeypatch.setattr(blas, "mkl_library", lambda: None)
    assert blas.choose({}) == blas.choose({"SIGMA_CPU_BLAS": "openblas"}) == "openblas"
    with pytest.raises(SigmaError, match="expected one of auto, mkl, openblas"):
        blas.choose({"SIGMA_CPU_BLAS": "atlas"})


def test_asking_for_mkl_without_it_is_an_error_not_a_fallback(monkeypatch):
    monkeypatch.setattr(blas, "mkl_library", lambda: None)
    with pytest.raises(SigmaError, match=r"SIGMA_CPU_BLAS=mkl but oneMKL is not installed"):
        blas.choose({"SIGMA_CPU_BLAS": "mkl"})
    assert blas.summary({"SIGMA_CPU_BLAS": "mkl"}).startswith("BLAS: SIGMA_CPU_BLAS=mkl but oneMKL is not installed")


def test_training_with_mkl_asked_for_and_missing_exits_2_with_one_line(tmp_path):
    """In a fresh process, with the wheel hidden from its file lookup (as on a machine without it)."""
    code = ("import sys, importlib.metadata as m\n"
            "real = m.files\n"
            "m.files = lambda name: (_ for _ in ()).throw(m.PackageNotFoundError(name)) if name == 'mkl' else real(name)\n"
            "from sigma_core import cli\n"
            f"sys.exit(cli.main(['train', {XOR!r}, '--handler', 'cpu', '--quiet']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**_environ(), "SIGMA_CPU_BLAS": "mkl"})
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "SIGMA_CPU_BLAS=mkl but oneMKL is not installed" in errors[0], done.stderr


def _environ():
    import os

    return {key: value for key, value in os.environ.items() if key != "SIGMA_CPU_BLAS"}


def test_sigma_plugins_names_the_provider(monkeypatch, capsys):
    monkeypatch.setenv("SIGMA_CPU_BLAS", "openblas")
    assert cli.main(["plugins", "--json"]) == 0
    row = next(r for r in json.loads(capsys.readouterr().out) if r["kind"] == "handler" and r["name"] == "cpu")
    assert row["available"] and row["reason"] == "BLAS: openblas, forced by SIGMA_CPU_BLAS"
    monkeypatch.delenv("SIGMA_CPU_BLAS")
    assert cli.main(["plugins"]) == 0
    assert f"available — BLAS: {blas.choose({})}" in capsys.readouterr().out


def test_the_run_header_line_names_the_provider(caplog, tmp_path):
    with caplog.at_level(logging.INFO):
        assert cli.main(["train", XOR, "--handler", "cpu", "--quiet", "--out", str(tmp_path / "r.json")]) == 0
    headers = [r.getMessage() for r in caplog.records if "parameters on" in r.getMessage()]
    assert headers and headers[0].endswith(f"blas={blas.choose()}>"), headers


# -- oneMKL's products ----------------------------------------------------------------------------------
def _bound(x, w, bias, dtype):
    """Rounding error bound per element of x·w + bias summed in ``dtype``: depth·eps·(|x|·|w|) plus the bias's
    addition (the usual gamma_k bound, with 2x slack for fused multiply-adds' different roundings)."""
    eps = numpy.finfo(dtype).eps
    magnitude = numpy.abs(x).astype(float) @ numpy.abs(w).astype(float) + numpy.abs(bias)
    return 2 * (x.shape[1] + 1) * eps * magnitude + numpy.finfo(dtype).tiny


@needs_mkl
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("parts", [1, 2])
def test_mkl_dense_and_products_agree_with_float64_within_their_rounding(monkeypatch, dtype, parts):
    from sigma_cpu import blas_pool, kernels

    monkeypatch.setenv("SIGMA_CPU_BLAS", "mkl")  # also where CI forces openblas for the whole run
    k = kernels.NumbaKernels(dtype)
    assert k.provider == "mkl"
    if parts == 2:  # the column blocks on two threads, whatever this machine's pool
        monkeypatch.setattr(kernels, "GEMM_PARALLEL_MIN", 0)
        monkeypatch.setattr(blas_pool, "threads", lambda: 2)
        if not blas_pool.PARALLEL:
            pytest.skip(f"numba's pool is not shared here: {blas_pool.describe()}")
    rng = numpy.random.default_rng(parts)
    for rows, depth, cols in [(3, 4, 5), (32, 256, 1024), (100, 784, 33), (7, 1, 17)]:
        x, w = rng.standard_normal((rows, depth)).astype(dtype), rng.standard_normal((depth, cols)).astype(dtype)
        bias = rng.standard_normal(cols).astype(dtype)
        exact = x.astype(float) @ w.astype(float) + bias
        bound = _bound(x, w, bias, dtype)
        y = k.dense(x, w, bias, "relu")
        assert numpy.all(numpy.abs(y - numpy.maximum(exact, 0)) <= bound)
        assert numpy.all(y[exact < -bound] == 0)
        assert numpy.all(numpy.abs(k.dense(x, w, None, "none") - (exact - bias)) <= bound)
        g = rng.standard_normal((rows, cols)).astype(dtype)  # the backward pass's transposed operands
        assert numpy.all(numpy.abs(k.matmul(g, w.T) - g.astype(float) @ w.T) <= _bound(g, w.T, 0, dtype))
        assert numpy.all(numpy.abs(k.matmul(x.T, g) - x.T.astype(float) @ g) <= _bound(x.T, g, 0, dtype))


@pytest.mark.parametrize("provider", [pytest.param("mkl", marks=needs_mkl), "openblas"])
@pytest.mark.parametrize("parts", [1, 2])
def test_matmul_into_takes_strided_step_slices_and_writes_only_its_buffer(monkeypatch, provider, parts):
    """A recurrent step's products (sigmann-recurrent's cpu kernel): a (B, H) slice ``[:, t]`` of a batch-major
    sequence, rows far apart, times a weight matrix or its transpose, into a slice of another sequence; the
    elements between the written rows keep their values."""
    from sigma_cpu import blas_pool, kernels

    monkeypatch.setenv("SIGMA_CPU_BLAS", provider)
    k = kernels.NumbaKernels("float32")
    assert k.provider == provider
    if parts == 2:
        monkeypatch.setattr(kernels, "GEMM_PARALLEL_MIN", 0)
        monkeypatch.setattr(blas_pool, "threads", lambda: 2)
    rng = numpy.random.default_rng(5)
    hs, u = rng.standard_normal((8, 5, 48)).astype("float32"), rng.standard_normal((48, 96)).astype("float32")
    out = numpy.full((8, 5, 96), 7.0, "float32")
    assert k.matmul_into(hs[:, 3], u, out[:, 1]) is not None
    exact = hs[:, 3].astype(float) @ u
    assert numpy.all(numpy.abs(out[:, 1] - exact) <= _bound(hs[:, 3], u, 0, "float32"))
    assert numpy.all(numpy.delete(out, 1, axis=1) == 7.0)
    back = numpy.empty((8, 48), "float32")
    k.matmul_into(out[:, 1], u.T, back)
    assert numpy.all(numpy.abs(back - out[:, 1].astype(float) @ u.T) <= _bound(out[:, 1], u.T, 0, "float32"))


@needs_mkl
def test_mkl_launches_give_the_eager_bits(monkeypatch):
    """A recorded step's launch (sigmann-replay) runs the same loop on the same blocks as the eager call."""
    from sigma_cpu import kernels

    monkeypatch.setenv("SIGMA_CPU_BLAS", "mkl")
    k = kernels.NumbaKernels("float32")
    assert k.provider == "mkl"
    rng = numpy.random.default_rng(3)
    x, w = rng.standard_normal((64, 300)).astype("float32"), rng.standard_normal((300, 200)).astype("float32")
    bias = rng.standard_normal(200).astype("float32")
    eager, recorded = k.dense(x, w, bias, "relu").copy(), numpy.full((64, 200), numpy.nan, "float32")
    k.launch("dense", (x, w, bias, "relu"), {}, recorded)()
    numpy.testing.assert_array_equal(recorded, eager)
    eager, recorded = k.matmul(x.T, eager).copy(), numpy.full((300, 200), numpy.nan, "float32")
    k.launch("matmul", (x.T, k.dense(x, w, bias, "relu")), {}, recorded)()
    numpy.testing.assert_array_equal(recorded, eager)


@needs_mkl
def test_mkl_runs_sequential_next_to_one_openmp_runtime():
    """threadpoolctl's view after a training run on oneMKL: oneMKL sequential, numba's OpenMP the only one, even
    where the environment asks oneMKL for its Intel OpenMP layer."""
    code = ("import json, sys\nfrom sigma_core import cli\n"
            f"assert cli.main(['train', {XOR!r}, '--handler', 'cpu', '--quiet']) == 0\n"
            "from threadpoolctl import threadpool_info\n"
            "print(json.dumps(threadpool_info()))\n")
    for threads in ("1", "2"):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**_environ(), "NUMBA_NUM_THREADS": threads, "SIGMA_CPU_BLAS": "mkl",
                                   "MKL_THREADING_LAYER": "INTEL"})
        pools = json.loads(done.stdout.splitlines()[-1])
        mkl = [p for p in pools if p["internal_api"] == "mkl"]
        assert mkl and all(p["threading_layer"] == "sequential" for p in mkl), pools
        openmp = {Path(p["filepath"]).name for p in pools if p["user_api"] == "openmp"}
        assert len(openmp) <= 1 and not any("iomp" in name for name in openmp), pools
