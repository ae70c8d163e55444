"""Prometheus `/metrics` for a worker: its engine's Stats, read at scrape time (names in docs/operations.md).

Alongside the `tandem_worker_*` names it exports the few vLLM names that the llm-d / Gateway API Inference
Extension endpoint picker (EPP) scrapes, with vLLM's labels and meaning, so a cloud worker can sit in an
InferencePool (deploy/k8s/overlays/gateway-api). vLLM's other metrics are deliberately not mirrored.
"""

import time

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from serving.engine_api import Engine, EngineStats

# What the EPP reads (its --total-queued-requests-metric, --kv-cache-usage-percentage-metric, --lora-info-metric
# and the running-requests metric), named as vLLM names them.
VLLM_RUNNING = "vllm:num_requests_running"
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
VLLM_LORA_INFO = "vllm:lora_requests_info"


def _gauge(name: str, doc: str, labels: dict[str, str], value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


def kv_cache_usage(s: EngineStats) -> float:
    """The fraction (0 to 1, despite vLLM's `_perc`) of KV blocks in use; 0 for an engine without a pool."""
    return s.kv_blocks_used / s.kv_blocks_total if s.kv_blocks_total else 0.0


def vllm_families(s: EngineStats) -> list[GaugeMetricFamily]:
    model = {"model_name": s.model_id}
    # vLLM exports this only when LoRA is on; Tandem (no adapters, ever) always does, so an EPP configured for
    # LoRA affinity sees "none loaded, room for none", not a missing metric. Its value is when it was read, as vLLM's.
    no_lora = {"running_lora_adapters": "", "waiting_lora_adapters": "", "max_lora": "0"}
    return [
        _gauge(VLLM_RUNNING, "Requests in execution batches (tandem_worker_running)", model, s.running),
        _gauge(VLLM_WAITING, "Requests waiting to be processed (tandem_worker_queue_depth)", model, s.queue_depth),
        _gauge(VLLM_KV_CACHE_USAGE, "KV-cache usage. 1 means 100 percent usage", model, kv_cache_usage(s)),
        _gauge(VLLM_LORA_INFO, "Running stats on LoRA requests (Tandem serves none)", no_lora, time.time()),
    ]


class EngineCollector:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def collect(self):
        s = self._engine.stats()
        labels = {"model": s.model_id, "kind": s.kind, "execution_provider": s.execution_provider}

        def gauge(name: str, doc: str, value: float):
            return _gauge(name, doc, labels, value)

        def counter(name: str, doc: str, value: float):
            family = CounterMetricFamily(name, doc, labels=list(labels))
            family.add_metric(list(labels.values()), value)
            return family

        yield gauge("tandem_worker_queue_depth", "Requests waiting to be scheduled", s.queue_depth)
        yield gauge("tandem_worker_running", "Sequences running", s.running)
        yield gauge("tandem_worker_kv_blocks_used", "KV blocks in use", s.kv_blocks_used)
        yield gauge("tandem_worker_kv_blocks_total", "KV blocks in the pool", s.kv_blocks_total)
        yield gauge("tandem_worker_tokens_per_second", "Output tokens per second, last 10 s", s.tokens_per_s)
        yield gauge("tandem_worker_memory_bytes", "GPU memory reserved (CUDA) or process RSS (CPU)", s.memory_bytes)
        yield gauge(
            "tandem_worker_memory_watermark_bytes", "Peak of tandem_worker_memory_bytes", s.memory_watermark_bytes
        )
        yield counter(
            "tandem_worker_prefix_hit_tokens", "Prompt tokens served from the prefix cache", s.prefix_hit_tokens
        )
        yield counter("tandem_worker_prefix_query_tokens", "Prompt tokens admitted", s.prefix_query_tokens)
        yield counter("tandem_worker_requests", "Requests admitted", s.requests_total)
        yield from vllm_families(s)  # the same Stats: in one scrape both names always agree


def metrics_app(engine: Engine) -> FastAPI:
    registry = CollectorRegistry()
    registry.register(EngineCollector(engine))
    app = FastAPI(title="Tandem worker metrics", docs_url=None, redoc_url=None)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
