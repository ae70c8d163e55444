#!/usr/bin/env bash
# One command on a GPU machine: the gpu-marked tests, then the kernel figures (bench/gpu_kernels.py).
# Under 8 minutes on one GPU. Python: $PYTHON, else the repo's .venv (make install with a CUDA build of
# torch), else python3. Where the machine has no package registry (the lent H200), fetch the missing
# wheels beforehand on a machine that has one (python bench/gpu_wheels.py) and bring .whl/ along:
# they are installed here into a directory of their own that shadows nothing but themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
if compgen -G ".whl/*.whl" > /dev/null; then
  SITE="${TMPDIR:-/tmp}/tandem-site"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA device: run this on a GPU machine")'
timeout 240 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/gpu
timeout 240 "$PY" bench/gpu_kernels.py
