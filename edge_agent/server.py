"""`tandem edge-agent`: export (once, cached) and serve a checkpoint on onnxruntime."""

import asyncio
import logging
import socket
from dataclasses import dataclass
from pathlib import Path

from edge_agent.export import cached_export, keep_marked_in_use
from edge_agent.local_api import local_app
from edge_agent.providers import DEFAULT_PRIORITY
from edge_agent.quantize import FP32, Quantization
from edge_agent.registration import default_agent_id, keep_registered
from edge_agent.runner import OnnxStepModel
from edge_agent.serial_engine import SerialEngine
from serving.checkpoint import load_tokenizer, model_id_for
from serving.embedded_http import serve_http
from serving.openai.chat_tokenizer import ChatTokenizer
from serving.telemetry import setup_tracing, shutdown_tracing
from serving.worker_metrics import metrics_app
from serving.worker_service import serve

log = logging.getLogger(__name__)


def engine_for(
    export_dir: Path,
    model_dir: Path,
    model_id: str | None = None,
    priority: tuple[str, ...] = DEFAULT_PRIORITY,
    require_npu: bool = False,
) -> SerialEngine:
    step_model = OnnxStepModel(export_dir, priority, require_npu)
    log.info("edge model %s (%s) runs on %s", export_dir, step_model.quantization, step_model.execution_provider)
    return SerialEngine(
        step_model,
        load_tokenizer(export_dir),
        eos_token_ids=step_model.eos_token_ids,
        model_id=model_id_for(model_dir, model_id),
        kind="edge",
        execution_provider=step_model.execution_provider,
    )


@dataclass(frozen=True)
class RegisterWith:
    gateway_url: str
    token: str
    agent_id: str | None = None
    advertise: str | None = None  # grpc://host:port the gateway should use; default: the listen address


def run(
    model_dir: Path,
    host: str,
    port: int,
    cache_dir: Path,
    model_id: str | None = None,
    priority: tuple[str, ...] = DEFAULT_PRIORITY,
    require_npu: bool = False,
    register: RegisterWith | None = None,
    quantization: Quantization = FP32,
    local_http_port: int | None = None,
    metrics_port: int | None = None,
) -> None:
    setup_tracing("tandem-edge-agent")
    try:
        export_dir = cached_export(model_dir, cache_dir, quantization)
        engine = engine_for(export_dir, model_dir, model_id, priority, require_npu)
        tasks = [lambda: keep_marked_in_use(export_dir)]
        if local_http_port:
            # Private prompts from this device's SDK: loopback only, whatever --host says.
            app = local_app(engine, ChatTokenizer(model_dir), engine.stats().model_id)  # token: tandem_sdk.local_token
            tasks.append(lambda: serve_http(app, "127.0.0.1", local_http_port))
            log.info("local agent API on http://127.0.0.1:%d (loopback only)", local_http_port)
        if metrics_port:
            tasks.append(lambda: serve_http(metrics_app(engine), host, metrics_port))
        if register is not None:
            stats = engine.stats()
            endpoint = register.advertise or f"grpc://{host}:{port}"
            agent_id = register.agent_id or default_agent_id(socket.gethostname(), port)

            tasks.append(lambda: keep_registered(register.gateway_url, register.token, agent_id, endpoint,
                                                 stats.model_id, stats.execution_provider,
                                                 stats.max_context_tokens))  # fmt: skip

        async def background():
            await asyncio.gather(*(task() for task in tasks))

        asyncio.run(serve(engine, host, port, background))
    finally:
        shutdown_tracing()
