"""`tandem cloud-worker`: load a checkpoint, build the paged engine, serve it over the Worker gRPC service."""

import asyncio
import logging
from pathlib import Path

from cloud_worker.build import build_engine
from cloud_worker.engine.config import EngineConfig
from cloud_worker.hint_publisher import HintPublisher
from proto.prefix_hints import DEFAULT_HINT_TTL_S, default_worker_id, worker_id_for
from serving.checkpoint import model_id_for
from serving.embedded_http import serve_http
from serving.telemetry import setup_tracing, shutdown_tracing
from serving.worker_metrics import metrics_app
from serving.worker_service import serve

log = logging.getLogger(__name__)


def run(
    model_dir: Path,
    host: str,
    port: int,
    model_id: str | None = None,
    config: EngineConfig | None = None,
    redis_url: str | None = None,
    worker_id: str | None = None,
    hint_ttl_s: float = DEFAULT_HINT_TTL_S,
    metrics_port: int | None = None,
    serve_openai: bool = False,
) -> None:
    setup_tracing("tandem-cloud-worker")
    model_id = model_id_for(model_dir, model_id)
    publisher = None
    if redis_url:
        worker_id = worker_id_for(worker_id) if worker_id else default_worker_id(host, port)  # as gateways read it
        publisher = HintPublisher(redis_url, model_id, worker_id, hint_ttl_s)
        log.info("publishing prefix hints to Redis as worker %s (ttl %.0f s)", worker_id, hint_ttl_s)
    else:
        log.info("REDIS_URL not set: prefix hints are not published (gateways route by their own history)")
    try:
        engine = build_engine(model_dir, model_id, config, publisher.publish if publisher else None)
        background = None
        if metrics_port:
            app = metrics_app(engine)
            if serve_openai:  # opened in so many words: no key is checked here, an inference gateway is in front
                from serving.engine_app import add_openai_routes
                from serving.openai.chat_tokenizer import ChatTokenizer

                add_openai_routes(app, engine, ChatTokenizer(model_dir), model_id, private=False, require_model=True)
                log.info("serving OpenAI chat completions on :%d (--serve-openai, no API key)", metrics_port)
            background = lambda: serve_http(app, host, metrics_port)  # noqa: E731
        asyncio.run(serve(engine, host, port, background, hint_worker_id=worker_id if publisher else ""))
    finally:
        if publisher:
            publisher.close()
        shutdown_tracing()
