"""``gemms-only`` per provider: the floor each ``cpu`` provider's step is set against."""

import numpy as np
import pytest

from sigmann_bench import bench

needs_mkl = pytest.mark.skipif(not bench.mkl_installed(), reason="the mkl wheel is not installed (sigma_cpu[mkl])")


def _params(rng):
    return [(rng.standard_normal((784, 128)).astype(np.float32), None),
            (rng.standard_normal((128, 10)).astype(np.float32), None)]


def test_the_rows_name_each_provider_only_where_it_is_installed():
    names = bench.system_names(["cpu", "numpy"])
    assert "gemms-only" in names
    assert ("gemms-only-mkl" in names) == ("sigma-cpu-openblas" in names) == bench.mkl_installed()


@needs_mkl
def test_mkl_gemms_compute_the_products_numpy_does(monkeypatch):
    monkeypatch.setenv("SIGMA_CPU_BLAS", "mkl")  # GemmsOnly sets it for its worker process; restored here
    params = _params(np.random.default_rng(0))
    ours, numpys = bench.GemmsOnly(params, 32, "mkl"), bench.GemmsOnly(params, 32, "numpy")
    ours.step(None, None)
    numpys.step(None, None)
    eps = np.finfo(np.float32).eps
    for (a, b, out), (_, _, theirs) in zip(ours.products, numpys.products):
        # within depth·eps·(|a|·|b|) of the exact product of its operands (the gamma_k bound; 2x for FMA roundings)
        exact = a.astype(float) @ b.astype(float)
        assert np.all(np.abs(out - exact) <= 2 * a.shape[1] * eps * (np.abs(a).astype(float) @ np.abs(b)))
        np.testing.assert_allclose(out, theirs, rtol=1e-3, atol=1e-3 * float(np.abs(theirs).max()))  # same step
