"""Prometheus `/metrics` for a worker: its engine's Stats, read at scrape time (names in docs/operations.md)."""

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from tandem.engine_api import Engine


class EngineCollector:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def collect(self):
        s = self._engine.stats()
        labels = {"model": s.model_id, "kind": s.kind, "execution_provider": s.execution_provider}

        def gauge(name: str, doc: str, value: float):
            family = GaugeMetricFamily(name, doc, labels=list(labels))
            family.add_metric(list(labels.values()), value)
            return family

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


def metrics_app(engine: Engine) -> FastAPI:
    registry = CollectorRegistry()
    registry.register(EngineCollector(engine))
    app = FastAPI(title="Tandem worker metrics", docs_url=None, redoc_url=None)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
