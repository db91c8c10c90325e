"""The CUDA handler's tests (a package, so pytest names them tests.test_cuda_*: see the test modules)."""
