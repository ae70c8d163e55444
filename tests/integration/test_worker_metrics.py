"""Both worker kinds export their Stats as Prometheus metrics on --metrics-port."""

import asyncio

import httpx
import pytest

from tests.conftest import free_port
from tests.integration.test_prefix_hints import generate
from tests.stack import start_worker_process

pytestmark = pytest.mark.integration


def scrape(port: int) -> dict[str, tuple[dict[str, str], float]]:
    """`tandem_worker_*` samples by name: their labels and value."""
    samples = {}
    for line in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text.splitlines():
        if line.startswith("tandem_worker_"):
            head, value = line.rsplit(" ", 1)
            name, _, labels = head.partition("{")
            pairs = (p.split("=", 1) for p in labels.rstrip("}").split(",") if p)
            samples[name] = ({k: v.strip('"') for k, v in pairs}, float(value))
    return samples


@pytest.mark.parametrize("kind", ["cloud", "edge"])
def test_the_worker_exports_its_stats_as_prometheus_metrics(kind, demo_checkpoint, redis_url, tmp_path):
    port, metrics_port = free_port(), free_port()
    args = ["--model", str(demo_checkpoint), "--port", str(port), "--metrics-port", str(metrics_port)]
    if kind == "cloud":
        worker = start_worker_process(["cloud-worker", *args, "--num-kv-blocks", "64"], {"REDIS_URL": redis_url})
    else:
        worker = start_worker_process(["edge-agent", *args, "--cache-dir", str(tmp_path)])
    try:
        asyncio.run(generate(port, "acme"))
        asyncio.run(generate(port, "acme"))
        samples = scrape(metrics_port)
    finally:
        worker.terminate()
        worker.wait(timeout=15)
    labels, requests = samples["tandem_worker_requests_total"]
    assert requests == 2
    assert labels["kind"] == kind
    assert labels["execution_provider"] == ("torch-cpu" if kind == "cloud" else "CPUExecutionProvider")
    assert samples["tandem_worker_memory_watermark_bytes"][1] >= samples["tandem_worker_memory_bytes"][1] > 0
    if kind == "cloud":
        assert samples["tandem_worker_kv_blocks_total"][1] == 64
        assert samples["tandem_worker_prefix_hit_tokens_total"][1] == 32  # the second request's two cached blocks
