#!/usr/bin/env bash
# One command on a GPU machine: the gpu-marked tests, then the kernel figures (bench/gpu_kernels.py).
# Under 8 minutes on one GPU. Needs the repo's .venv (make install) with a CUDA build of torch and triton.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA device: run this on a GPU machine")'
timeout 240 "$PY" -m pytest -q -m gpu tests/gpu
timeout 240 "$PY" bench/gpu_kernels.py
