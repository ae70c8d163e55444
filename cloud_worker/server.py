"""`tandem cloud-worker`: load a checkpoint and serve it over the Worker gRPC service."""

import asyncio
import logging
from pathlib import Path

import torch

from cloud_worker.engine.torch_step_model import TorchStepModel
from cloud_worker.loader import load_model
from tandem.checkpoint import load_tokenizer, model_id_for
from tandem.serial_engine import SerialEngine
from tandem.telemetry import setup_tracing, shutdown_tracing
from tandem.worker_service import serve

log = logging.getLogger(__name__)


def build_engine(model_dir: Path, model_id: str | None = None) -> SerialEngine:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_model(model_dir, device=device)
    return SerialEngine(
        TorchStepModel(model),
        load_tokenizer(model_dir),
        eos_token_ids=model.config.eos_token_ids,
        model_id=model_id_for(model_dir, model_id),
        kind="cloud",
        execution_provider=f"torch-{device}",
    )


def run(model_dir: Path, host: str, port: int, model_id: str | None = None) -> None:
    setup_tracing("tandem-cloud-worker")
    try:
        asyncio.run(serve(build_engine(model_dir, model_id), host, port))
    finally:
        shutdown_tracing()
