"""Fetch, here, the wheels the lent GPU machine lacks, so bench/gpu_suite.sh can run there without a network.

The GPU machine's image has PyTorch, Triton, pytest and much else for Python 3.12, but not all of the
worker's own dependencies (OpenTelemetry, FastAPI, redis, boto3, ...), and it reaches no package registry.
This resolves the project's dependencies for that interpreter and platform, keeps the wheels of packages
the image does not hold (and grpcio and protobuf, whose versions the generated gRPC code needs), and puts
them in .whl/ (git-ignored). Carry `.whl` in the device run; gpu_suite.sh installs them there.

    python bench/gpu_wheels.py                  # Python 3.12, manylinux x86_64 (the H200 image)
    python bench/gpu_wheels.py --python-version 3.11
"""

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What the GPU image already holds (the device tool's KINDS.md, read 2026-11-17): never carried.
IMAGE = """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython filelock flatbuffers fonttools fsspec h11 h5py hf-xet
httpcore httpx huggingface-hub humanize hypothesis idna iniconfig jinja2 joblib markdown markdown-it-py
markupsafe matplotlib mdurl ml-dtypes mpmath msgpack multidict networkx ninja numpy onnx onnx-ir onnxruntime
onnxscript packaging pandas pathspec pillow pip pluggy portalocker prometheus-client propcache psutil pyarrow
pybind11 pygments pyparsing pytest pytest-timeout pytest-xdist python-dateutil pyyaml regex requests rich
safetensors scipy setuptools shellingham six sympy tabulate tokenizers torch tqdm transformers triton typer
typing-extensions urllib3 uvloop werkzeug wheel wrapt xxhash yarl zipp""".split()
ALWAYS = {"grpcio", "protobuf"}  # the generated *_pb2*.py files need at least our pinned versions
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35)] + ["manylinux2014_x86_64"]


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [r for r in project["dependencies"] if normalize(re.split(r"[<>=!~ \[]", r)[0]) != "torch"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python-version", default="3.12")
    parser.add_argument("--out", type=Path, default=ROOT / ".whl")
    args = parser.parse_args()
    image = {normalize(n) for n in IMAGE} - ALWAYS
    with tempfile.TemporaryDirectory() as tmp:
        platforms = [flag for p in PLATFORMS for flag in ("--platform", p)]
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--dest", tmp,
                   "--python-version", args.python_version, "--implementation", "cp", *platforms, *requirements()]  # fmt: skip
        if subprocess.run(command).returncode != 0:
            sys.exit("pip could not resolve the wheels (is a package registry reachable from here?)")
        shutil.rmtree(args.out, ignore_errors=True)
        args.out.mkdir(parents=True)
        kept = []
        for wheel in sorted(Path(tmp).glob("*.whl")):
            if normalize(wheel.name.split("-")[0]) not in image:
                shutil.copy2(wheel, args.out / wheel.name)
                kept.append(wheel)
    size = sum(w.stat().st_size for w in args.out.glob("*.whl"))
    print(f"{len(kept)} wheels, {size / 2**20:.1f} MiB, in {args.out}; carry it: run(..., carry=['.whl'])")


if __name__ == "__main__":
    main()
