#!/usr/bin/env bash
# Every GPU check and benchmark of the cuda handler, in one device call (at most 9.5 minutes; fewer if all goes well).
#
# How to run it, from the repository root of a session that is lent a GPU:
#   1. here, once (the MNIST test set for the end-to-end test; it is not in git):
#        mkdir -p .gpu_data && cp -r ../shared/data/mnist .gpu_data/ && echo /.gpu_data/ >> .git/info/exclude
#   2. the device tool:  run(command="bash sigma_cuda/gpu_check.sh", carry=[".gpu_data"], timeout_s=600)
#   3. read the table at the end of output_tail; the logs and JSON come back from $OUT:
#        gpu_check.log (everything), pytest.txt, junit.xml, plugins.txt, profile.txt, bench.json, bench.txt
#
# The device image has Python 3.12 with CuPy (cupy-cuda13x), PyTorch, JAX, numba, scikit-learn and
# pytest, and nothing can be downloaded there. So the repository's distributions are installed from
# the working tree that travels with the call: `pip install --no-deps --no-index --no-build-isolation -e`
# (setuptools is in the image). The core's one dependency missing there, platformdirs, is replaced by a
# four-line stand-in (Sigma only asks it for a cache directory).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false SIGMA_MNIST_DIR="${SIGMA_MNIST_DIR:-$PWD/.gpu_data/mnist}"
OUT="${OUT:-/tmp/sigma-gpu-check}"
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
PY="${PYTHON:-python3}"
started=$(date +%s)
stage() { echo; echo "== $1 (+$(( $(date +%s) - started )) s)"; }

stage "device and software"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
"$PY" -c "import sys, numpy, cupy; print('python', sys.version.split()[0], '| numpy', numpy.__version__, '| cupy', cupy.__version__,
'| CUDA runtime', cupy.cuda.runtime.runtimeGetVersion(), '| driver', cupy.cuda.runtime.driverGetVersion())"
for m in torch jax numba sklearn; do "$PY" -c "import $m; print('$m', $m.__version__)" 2>/dev/null || echo "$m: not importable"; done

stage "install the repository's distributions"
if ! "$PY" -c "import platformdirs" 2>/dev/null; then
    mkdir -p /tmp/sigma-shim
    printf 'import os\n\n\ndef user_cache_dir(appname=None, *args, **kwargs):\n    return os.path.join(os.path.expanduser("~/.cache"), appname or "")\n' \
        > /tmp/sigma-shim/platformdirs.py
    export PYTHONPATH="/tmp/sigma-shim${PYTHONPATH:+:$PYTHONPATH}"
    echo "platformdirs: using the stand-in in /tmp/sigma-shim"
fi
"$PY" -m pip install -q --no-deps --no-index --no-build-isolation \
    -e . -e ./sigma_cpu -e ./sigma_cuda -e ./plugins/sigmann-sklearn -e ./plugins/sigmann-mnist \
    -e ./plugins/sigmann-bench -e ./plugins/sigmann-maxout || { echo "INSTALL FAILED"; exit 1; }
"$PY" -m sigma_core plugins | tee "$OUT/plugins.txt" | grep -E '^KIND|^handler'

stage "sigma_cuda tests (conformance float32/float64, layers, end to end, checkpoints, async, allocations, CUDA graph replay)"
timeout 270 "$PY" -m pytest sigma_cuda/tests -q -n 8 -p no:cacheprovider -rfEs --durations=15 \
    --junitxml="$OUT/junit.xml" > "$OUT/pytest.txt" 2>&1
tests_rc=$?
tail -n 40 "$OUT/pytest.txt"
grep -E "^(FAILED|ERROR)" "$OUT/pytest.txt" | head -n 40

stage "where a step's time goes (wall, host, device per step; kernels; host profile)"
timeout 60 "$PY" sigma_cuda/gpu_profile.py > "$OUT/profile.txt" 2>&1
grep -E "^(device|sigma-mlp)" "$OUT/profile.txt"

stage "benchmarks: sigma bench --handlers cuda (ms/iteration, samples/s, ratios)"
timeout 180 "$PY" -m sigma_core bench --handlers cuda --json > "$OUT/bench.json"
bench_rc=$?
"$PY" - "$OUT/bench.json" <<'EOF' | tee "$OUT/bench.txt"
import json, sys
from sigmann_bench.bench import format_table
records = json.load(open(sys.argv[1]))
print(format_table(records))
print()
print(f"{'workload':<14}{'system':<15}{'batch':>6}{'ms/iter':>10}{'samples/s':>12}{'vs sigma':>10}{'vs gemms':>10}")
for r in records:
    if r["measure"] == "iteration":
        gemms = f"{r['ratio_to_gemms']:.2f}x" if r.get("ratio_to_gemms") else "-"
        print(f"{r['workload']:<14}{r['system']:<15}{r['batch']:>6}{r['median_ms']:>10.3f}{r['samples_per_s']:>12.0f}"
              f"{r['ratio_to_ours']:>9.2f}x{gemms:>10}")
EOF

stage "summary"
echo "tests: exit $tests_rc ($(tail -n 1 "$OUT/pytest.txt"))"
echo "bench: exit $bench_rc"
exit $(( tests_rc || bench_rc ))
