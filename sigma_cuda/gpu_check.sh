#!/usr/bin/env bash
# The cuda handler's GPU check, in two parts: each one device call that fits 10 minutes on a cold kernel cache.
#   --part 1  install, preflight, the GPU tests (sigma_cuda/tests/test_cuda_gpu.py, serially), the count;
#             arguments after the part go to pytest and to the count alike: if the tests outgrow the budget,
#             run them in two calls, e.g. `--part 1 -k Conformance`, then `--part 1 -k "not Conformance"`
#   --part 2  install, preflight, whether sigma-cuda's steps are replayed, gpu_profile.py, sigma bench
# Either part stops with one line ("GPU CHECK STOPPED: ...") when cupy, a distribution or the cuda handler is
# missing, and exits non-zero unless everything it ran passed: part 1 also when fewer GPU tests ran than
# were collected (a skip counts as not run; a test left out for missing MNIST files is named).
#
# How to run it, from the repository root of a session that is lent a GPU:
#   1. here, once (the MNIST test set for the end-to-end test; it is not in git):
#        mkdir -p .gpu_data && cp -r ../shared/data/mnist .gpu_data/ && echo /.gpu_data/ >> .git/info/exclude
#   2. the device tool, once per part:
#        run(command="bash sigma_cuda/gpu_check.sh --part 1", carry=[".gpu_data"], timeout_s=600)
#   3. every figure of the part is in $OUT/gpu_figures.txt (also printed last); the logs are in $OUT too:
#        gpu_check.log, pytest.txt, junit.xml, deselect.txt | replay.json, profile.txt, bench.json
#
# The device image has Python 3.12 with CuPy, PyTorch, JAX, numba, scikit-learn and pytest (pytest-xdist
# perhaps not: the tests run serially, which the busy-device timing test needs anyway), and nothing can be
# downloaded there. So the distributions the tests import (gpu_check.py distributions: read from their
# imports) are installed from the working tree that travels with the call: `pip install --no-deps --no-index
# --no-build-isolation -e`. The core's one dependency missing there, platformdirs, is replaced by a
# four-line stand-in (Sigma only asks it for a cache directory).
set -uo pipefail
part=""
[ "${1:-}" = "--part" ] && part="${2:-}"
selection=("${@:3}")  # part 1: more pytest arguments (a -k selection)
if [ "$part" != 1 ] && [ "$part" != 2 ]; then
    echo "usage: bash sigma_cuda/gpu_check.sh --part 1|2  (1: GPU tests; 2: replay, profile, bench)" >&2
    exit 2
fi
cd "$(dirname "$0")/.." || exit 1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false SIGMA_MNIST_DIR="${SIGMA_MNIST_DIR:-$PWD/.gpu_data/mnist}"
# cuBLAS promises identical bits run to run only with one active stream or this workspace setting; a graph
# replay runs its products on a stream of its own, so the bit-identity tests need it.
export CUBLAS_WORKSPACE_CONFIG=:4096:8
OUT="${OUT:-/tmp/sigma-gpu-check}"
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
PY="${PYTHON:-python3}"
GPU_TESTS=sigma_cuda/tests/test_cuda_gpu.py
BUDGET=570  # seconds for the whole part: under the device tool's 600
started=$(date +%s)
stage() { echo; echo "== $1 (+$(( $(date +%s) - started )) s)"; }
# limit WANT: WANT seconds, or what the budget has left after 20 s kept for the figures, if less
limit() { local have=$(( BUDGET - ($(date +%s) - started) - 20 )); echo $(( $1 < have ? $1 : (have > 1 ? have : 1) )); }

stage "part $part: device and software"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader \
    || echo "nvidia-smi: not available"
for m in torch jax numba sklearn; do "$PY" -c "import $m; print('$m', $m.__version__)" 2>/dev/null || echo "$m: not importable"; done

stage "install the distributions the GPU tests import"
if ! "$PY" -c "import platformdirs" 2>/dev/null; then
    mkdir -p /tmp/sigma-shim
    printf 'import os\n\n\ndef user_cache_dir(appname=None, *args, **kwargs):\n    return os.path.join(os.path.expanduser("~/.cache"), appname or "")\n' \
        > /tmp/sigma-shim/platformdirs.py
    export PYTHONPATH="/tmp/sigma-shim${PYTHONPATH:+:$PYTHONPATH}"
    echo "platformdirs: using the stand-in in /tmp/sigma-shim"
fi
folders=$("$PY" sigma_cuda/gpu_check.py distributions) || { echo "GPU CHECK STOPPED: gpu_check.py distributions failed"; exit 1; }
echo "installing: $folders"
# shellcheck disable=SC2046  # one -e per folder
"$PY" -m pip install -q --no-deps --no-index --no-build-isolation $(printf -- '-e %s ' $folders) \
    || { echo "GPU CHECK STOPPED: pip install -e of $folders failed"; exit 1; }

stage "preflight: cupy, every distribution, the cuda handler"
"$PY" sigma_cuda/gpu_check.py preflight "$OUT" || exit 1

rc=0
if [ "$part" = 1 ]; then
    stage "GPU tests, serially: conformance float32/float64, layers, end to end, checkpoints, the device contract, graph replay"
    deselect=()
    while IFS=$'\t' read -r test _; do deselect+=(--deselect "$GPU_TESTS::$test"); done < "$OUT/deselect.txt"
    timeout "$(limit 480)" "$PY" -m pytest "$GPU_TESTS" -q -p no:cacheprovider -rfEs --durations=15 \
        --junitxml="$OUT/junit.xml" "${deselect[@]}" "${selection[@]}" > "$OUT/pytest.txt" 2>&1
    tests_rc=$?
    [ "$tests_rc" = 124 ] && echo "GPU tests: stopped by the time budget"
    tail -n 30 "$OUT/pytest.txt"
    "$PY" sigma_cuda/gpu_check.py count "$OUT" "$GPU_TESTS" "${selection[@]}"
    count_rc=$?
    rc=$(( tests_rc || count_rc ))
else
    stage "is sigma-cuda replayed as CUDA graphs (as sigma bench builds it)?"
    timeout "$(limit 90)" "$PY" sigma_cuda/gpu_check.py replay-status "$OUT" || rc=1

    stage "where a step's time goes (wall, host, device per step; kernels; host profile)"
    timeout "$(limit 90)" "$PY" sigma_cuda/gpu_profile.py > "$OUT/profile.txt" 2>&1 || rc=1
    grep -E "^(device|sigma-mlp)" "$OUT/profile.txt"

    stage "benchmarks: sigma bench --handlers cuda"
    timeout "$(limit 300)" "$PY" -m sigma_core bench --handlers cuda --json > "$OUT/bench.json" || rc=1
fi

stage "figures: $OUT/gpu_figures.txt"
"$PY" sigma_cuda/gpu_check.py figures "$OUT" || rc=1
echo "part $part: exit $rc"
exit "$rc"
