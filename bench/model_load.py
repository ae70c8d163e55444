"""Model load time: cold (object store → node-local cache → loaded) against warm (cache hit → loaded).

Builds a ~530 MB fp32 Llama-shape checkpoint once (random weights, cached under ~/.cache/tandem/bench),
starts moto's S3 server on loopback, pushes the checkpoint with `tandem model push`'s code, then times
"time to ready" as a cloud worker has it: resolve the s3:// reference through the model store, then load
the weights into the model. Cold runs start from an empty cache directory each time; warm runs hit the
cache a cold run filled. Also times a cold start with one stream (TANDEM_MODEL_FETCH_STREAMS=1) and one
plain GET of the weights alone, the baselines for the store's parallel ranged reads. Last line: one JSON
object.

    python bench/model_load.py --quick
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import boto3  # noqa: E402
import httpx  # noqa: E402

from modeling.loader import load_model  # noqa: E402
from tandem.demo_model import DemoShape, cached_demo_checkpoint  # noqa: E402
from tandem.model_store import ModelStore, ObjectStore, push  # noqa: E402

CACHE = Path.home() / ".cache" / "tandem" / "bench"
SHAPE = DemoShape(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
                  num_key_value_heads=4, fit_steps=0, model_vocab_size=32000)  # fmt: skip
BUCKET = "models"


def start_s3() -> tuple[subprocess.Popen, str]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url, timeout=1)
            return process, url
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise SystemExit("moto server did not start") from None
            time.sleep(0.1)


def time_to_ready(reference: str, cache_dir: Path, streams: int | None = None) -> tuple[float, float]:
    """(seconds to a verified local directory, seconds until the weights are loaded too)."""
    started = time.perf_counter()
    store = ModelStore(cache_dir, object_store_factory=lambda: ObjectStore(max_workers=streams))
    path = store.resolve(reference)
    resolved = time.perf_counter() - started
    load_model(path)
    elapsed = time.perf_counter() - started
    store.release()
    return resolved, elapsed


def single_get_s(reference: str, weights_sha: str, size: int) -> float:
    """One plain GET of the weights blob, streamed to a file: the baseline for parallel ranged reads."""
    bucket, prefix = reference.removeprefix("s3://").split("@")[0].split("/", 1)
    s3 = boto3.client("s3", region_name="us-east-1")
    started = time.perf_counter()
    body = s3.get_object(Bucket=bucket, Key=f"{prefix}/blobs/sha256-{weights_sha}")["Body"]
    with tempfile.TemporaryFile() as f:
        while chunk := body.read(8 * 2**20):
            f.write(chunk)
        assert f.tell() == size
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 runs of each instead of 3")
    args = parser.parse_args()
    runs = 2 if args.quick else 3
    checkpoint = cached_demo_checkpoint(CACHE / "llama-530m-bytes", SHAPE)
    size = sum(f.stat().st_size for f in checkpoint.iterdir())
    process, url = start_s3()
    os.environ.update(
        {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}
        | {"AWS_DEFAULT_REGION": "us-east-1"}
    )
    work = Path(tempfile.mkdtemp(prefix="tandem-model-load-"))
    try:
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)
        started = time.perf_counter()
        reference = str(push(checkpoint, f"s3://{BUCKET}/bench/llama", ObjectStore()))
        push_s = time.perf_counter() - started
        print(f"pushed {size / 2**20:.0f} MB in {push_s:.1f} s as {reference}", file=sys.stderr)
        weights = json.loads(
            ObjectStore().get_bytes(BUCKET, f"bench/llama/manifests/sha256-{reference.split(':')[-1]}.json")
        )
        blob = next(f for f in weights["files"] if f["path"] == "model.safetensors")
        single = statistics.median(single_get_s(reference, blob["sha256"], blob["size"]) for _ in range(runs))
        cold, cold_fetch, warm = [], [], []
        for i in range(runs):
            fetched, ready = time_to_ready(reference, work / f"cold-{i}")
            cold.append(ready)
            cold_fetch.append(fetched)
            print(f"cold {i}: fetched in {fetched:.2f} s, ready in {ready:.2f} s", file=sys.stderr)
        one_stream = [time_to_ready(reference, work / f"one-{i}", streams=1)[1] for i in range(runs)]
        print(f"cold with one stream: {statistics.median(one_stream):.2f} s", file=sys.stderr)
        for i in range(runs):
            warm.append(time_to_ready(reference, work / "cold-0")[1])
            print(f"warm {i}: ready in {warm[-1]:.2f} s", file=sys.stderr)
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    cold_s, warm_s = statistics.median(cold), statistics.median(warm)
    result = {
        "checkpoint_mb": round(size / 2**20),
        "cold_s": round(cold_s, 3),
        "warm_s": round(warm_s, 3),
        "warm_speedup": round(cold_s / warm_s, 2),
        "cold_mb_s": round(size / 2**20 / cold_s, 1),
        "cold_fetch_s": round(statistics.median(cold_fetch), 3),
        "cold_one_stream_s": round(statistics.median(one_stream), 3),
        "single_get_s": round(single, 3),
        # What the ranged reads buy: one plain GET of the weights against the store's whole cold fetch
        # (ranged GETs of every file, plus verifying every SHA-256).
        "fetch_speedup_vs_single_get": round(single / statistics.median(cold_fetch), 2),
        "push_s": round(push_s, 2),
        "runs": runs,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
