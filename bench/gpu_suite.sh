#!/usr/bin/env bash
# One command on a GPU machine: the gpu-marked tests, the kernel figures (bench/gpu_kernels.py), then the engine's
# tokens per second with CUDA graphs on and off against HF on the same GPU (bench/gpu_engine.py). About 6 minutes
# on one H200. Every step runs even when one before it fails (a lent GPU's minutes are few: one run should tell
# everything), and the suite fails at the end if any did. Each step's output is also written to $SUITE_LOG_DIR
# (default: $OUT where the device tool sets it, else bench/gpu-logs).
# Python: $PYTHON, else the repo's .venv (make install with a CUDA build of torch), else python3. Where the
# machine has no package registry (the lent H200), fetch the missing wheels beforehand on a machine that has one
# (python bench/gpu_wheels.py) and bring .whl/ along: they are installed here into a directory of their own that
# shadows nothing but themselves.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
LOGS="${SUITE_LOG_DIR:-${OUT:-bench/gpu-logs}}"
mkdir -p "$LOGS"
if compgen -G ".whl/*.whl" > /dev/null; then
  SITE="${TMPDIR:-/tmp}/tandem-site"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl || exit 1
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA device: run this on a GPU machine")' || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>/dev/null | tee "$LOGS/gpu.txt"
"$PY" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee -a "$LOGS/gpu.txt"
# The test suite's conftest turns Triton's interpreter on for CPU runs; here the kernels must compile for the GPU.
export TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
failed=()
step() {  # step NAME SECONDS COMMAND...: run it, keep its output, remember a failure and go on
  local name=$1 limit=$2; shift 2
  echo "== $name"
  local started=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee "$LOGS/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "== $name: rc $rc in $((SECONDS - started)) s"
  [ "$rc" -eq 0 ] || failed+=("$name (rc $rc)")
}
step tests 170 "$PY" -m pytest -q -p no:cacheprovider -o addopts= -m gpu tests/gpu
step kernels 150 "$PY" bench/gpu_kernels.py
step engine 180 "$PY" bench/gpu_engine.py
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}"
  exit 1
fi
echo "all passed"
