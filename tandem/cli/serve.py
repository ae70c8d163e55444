"""The processes: `tandem up` (the whole local stack), `gateway`, `cloud-worker`, `sim-worker`, `edge-agent`.
Engine options take their defaults from `EngineConfig`, so the CLI never repeats them."""

import errno
import os
from pathlib import Path
from typing import Annotated

import typer

from cloud_worker.engine.config import EngineConfig
from edge_agent.quantize import INT4
from proto.prefix_hints import given_worker_id
from tandem.cli.common import (
    DEFAULT_CACHE,
    GatewayModelDir,
    ModelDir,
    TokenizerDir,
    default,
    fail,
    model_name,
    settings_error,
    setup_logging,
)
from tandem.cli.edge import AccuracyLevel, Bits, BlockSize, KeepLmHead, QuantizeEmbedding, quantization


def _worker_id(value: str | None) -> str | None:
    """--worker-id checked as it is read: a port that is no number was a traceback at the worker's start."""
    if value is not None:
        try:
            given_worker_id(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    return value


def up(
    state_dir: Annotated[Path, typer.Option(help="where the demo model, exports and logs go")] = Path(".tandem"),
    policy: Annotated[
        Path,
        typer.Option(
            envvar="TANDEM_POLICY_FILE",  # as `tandem gateway` reads it: the flag, else the variable, else the default
            help="policy YAML (default: TANDEM_POLICY_FILE, else policies/default.yaml)",
            show_default=False,
            dir_okay=False,
        ),
    ] = Path("policies/default.yaml"),
    model: Annotated[
        list[Path] | None,
        typer.Option(help="a further checkpoint to serve (repeatable): a cloud worker and a pool of its own"),
    ] = None,
) -> None:
    """Run gateway + cloud worker + edge agent on loopback with the demo model. Ctrl-C stops all."""
    from tandem.stack import run_stack

    raise typer.Exit(run_stack(state_dir, policy, model))


def gateway(
    model: GatewayModelDir,
    policy: Annotated[
        Path | None,
        typer.Option(help="policy YAML (default: TANDEM_POLICY_FILE, else policies/default.yaml)", dir_okay=False),
    ] = None,
    host: Annotated[str | None, typer.Option(help="default: TANDEM_HOST, else 127.0.0.1")] = None,
    port: Annotated[int | None, typer.Option(help="default: TANDEM_PORT, else 8000")] = None,
    log_level: str = "info",
) -> None:
    """The OpenAI-compatible gateway. Other settings: TANDEM_* variables (docs/operations.md); a flag given wins
    over its variable, a flag not given leaves the variable (or the default) in force."""
    from pydantic import ValidationError

    from gateway.config import Settings
    from gateway.lifespan import ConfigError, preflight
    from gateway.server import run

    setup_logging(log_level)
    given = {
        name: value for name, value in (("policy_file", policy), ("host", host), ("port", port)) if value is not None
    }
    if (name := model_name(model)) is not None and not os.environ.get("TANDEM_MODEL_ID"):
        given["model_id"] = name  # an s3:// model by its reference's name, as the workers name it
    try:
        settings = Settings(model_dir=model, **given)
        preflight(settings)  # before the port is bound: the policy, the tenants, each model's files, in one line
    except ValidationError as exc:
        fail(settings_error(exc), 2, exc)
    except (ConfigError, OSError) as exc:
        fail(exc, 1, exc)
    run(settings, log_level)


def cloud_worker(
    model: ModelDir,
    host: str = "127.0.0.1",
    port: int = 50051,
    model_id: str | None = None,
    block_size: Annotated[
        int, typer.Option(help="KV block size in tokens (also the prefix-hint granularity)")
    ] = default(EngineConfig, "block_size_tokens"),
    kv_cache_mb: Annotated[
        int, typer.Option(help="KV pool size per rank, when --num-kv-blocks is not given")
    ] = default(EngineConfig, "kv_cache_mb"),
    num_kv_blocks: Annotated[int | None, typer.Option(help="KV pool size in blocks (overrides --kv-cache-mb)")] = None,
    max_batched_tokens: Annotated[
        int, typer.Option(help="token budget of one step (prefill chunks + decodes)")
    ] = default(EngineConfig, "max_num_batched_tokens"),
    max_num_seqs: Annotated[int, typer.Option(help="running sequences at most")] = default(
        EngineConfig, "max_num_seqs"
    ),
    tp: Annotated[int, typer.Option(help="tensor parallel ranks; the worker starts them itself")] = default(
        EngineConfig, "tensor_parallel_size"
    ),
    quantize: Annotated[str, typer.Option(help="none, or int8 (weight-only, per channel)")] = default(
        EngineConfig, "quantize"
    ),
    device: Annotated[str | None, typer.Option(help="cpu or cuda (default: cuda when available)")] = None,
    cuda_graphs: Annotated[bool, typer.Option(help="replay decode steps from CUDA graphs (CUDA, no TP)")] = True,
    cpu_linear: Annotated[
        str, typer.Option(help="CPU linears: auto (oneDNN, weights packed once, where torch has it) or aten")
    ] = default(EngineConfig, "cpu_linear"),
    redis_url: Annotated[
        str | None, typer.Option(envvar="REDIS_URL", help="publish prefix hints here (unset: not published)")
    ] = None,
    worker_id: Annotated[
        str | None,
        typer.Option(
            help="host:port gateways dial, the id hints are published under (default: listen address)",
            callback=_worker_id,
        ),
    ] = None,
    hint_ttl_s: Annotated[
        float, typer.Option(help="prefix hints expire this long after the worker stops refreshing")
    ] = 30.0,
    metrics_port: Annotated[int | None, typer.Option(help="serve Prometheus /metrics on this port")] = None,
    serve_openai: Annotated[
        bool,
        typer.Option(
            help="also serve OpenAI chat completions on --metrics-port, without API keys or Tandem's privacy "
            "routing: for an inference gateway in front (an llm-d InferencePool); off unless given"
        ),
    ] = False,
    log_level: str = "info",
) -> None:
    """A cloud worker: the paged engine serving the checkpoint over the Worker gRPC service."""
    from cloud_worker.build import default_device
    from cloud_worker.parallel.tensor_parallel import TensorParallelError
    from cloud_worker.server import run
    from modeling.loader import CheckpointError
    from modeling.model_config import UnsupportedModelError

    setup_logging(log_level)
    try:
        config = EngineConfig(
            block_size_tokens=block_size,
            kv_cache_mb=kv_cache_mb,
            num_kv_blocks=num_kv_blocks,
            max_num_batched_tokens=max_batched_tokens,
            max_num_seqs=max_num_seqs,
            tensor_parallel_size=tp,
            quantize=quantize,
            device=device or default_device(),
            decode_graphs="auto" if cuda_graphs else "off",
            cpu_linear=cpu_linear,
        )
    except ValueError as exc:
        fail(exc, 2, exc)
    try:
        if serve_openai and not metrics_port:
            raise ValueError("--serve-openai serves on --metrics-port: give one")
        if not 0 < hint_ttl_s < float("inf"):
            raise ValueError(f"--hint-ttl-s must be a finite number of seconds above 0, got {hint_ttl_s}")
        model_id = model_name(model, model_id)
        run(model, host, port, model_id, config, redis_url, worker_id, hint_ttl_s, metrics_port, serve_openai)
    except (CheckpointError, UnsupportedModelError, TensorParallelError, ValueError) as exc:
        fail(exc, 1, exc)


def sim_worker(
    model: TokenizerDir,
    host: str = "127.0.0.1",
    port: int = 50051,
    http_port: Annotated[
        int | None, typer.Option(help="also serve SGLang's /generate here (for sglang-router)")
    ] = None,
    model_id: Annotated[str | None, typer.Option(help="model id to report (default: the directory's name)")] = None,
    num_kv_blocks: Annotated[int, typer.Option(help="KV pool in blocks: small enough and placement matters")] = 1024,
    block_size: int = default(EngineConfig, "block_size_tokens"),
    prefill_us_per_token: Annotated[float, typer.Option(help="simulated cost of one uncached prompt token")] = 200.0,
    decode_us_per_token: Annotated[float, typer.Option(help="simulated cost of one output token")] = 2000.0,
    redis_url: Annotated[str | None, typer.Option(envvar="REDIS_URL", help="publish prefix hints here")] = None,
    worker_id: Annotated[
        str | None, typer.Option(help="host:port gateways dial (default: listen address)", callback=_worker_id)
    ] = None,
    hint_ttl_s: float = 30.0,
    log_level: str = "info",
) -> None:
    """A simulated worker: the engine's real scheduler and block manager, a sleep for the model."""
    from cloud_worker.sim_worker import run
    from serving.checkpoint import model_id_for

    setup_logging(log_level)
    run(
        model,
        host,
        port,
        http_port,
        model_id_for(model, model_name(model, model_id)),
        num_kv_blocks,
        block_size,
        prefill_us_per_token,
        decode_us_per_token,
        redis_url,
        worker_id,
        hint_ttl_s,
    )


_DISK_ERRORS = frozenset({errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT, errno.EPERM})


def edge_agent(
    model: ModelDir,
    host: str = "127.0.0.1",
    port: int = 50061,
    model_id: str | None = None,
    cache_dir: Annotated[Path, typer.Option(help="where ONNX exports are cached")] = DEFAULT_CACHE / "edge",
    providers: Annotated[
        str | None, typer.Option(help="comma-separated EP priority, e.g. QNNExecutionProvider,CPUExecutionProvider")
    ] = None,
    require_npu: Annotated[bool, typer.Option(help="fail at start instead of running without an NPU")] = False,
    bits: Bits = INT4.bits,
    block_size: BlockSize = INT4.block_size,
    accuracy_level: AccuracyLevel = INT4.accuracy_level,
    keep_lm_head: KeepLmHead = INT4.keep_lm_head,
    quantize_embedding: QuantizeEmbedding = INT4.quantize_embedding,
    register_url: Annotated[
        str | None,
        typer.Option(envvar="TANDEM_EDGE_REGISTER_URL", help="gateway to register with, e.g. http://gw:8000"),
    ] = None,
    register_token: Annotated[
        str | None, typer.Option(envvar="TANDEM_EDGE_TOKEN", help="the gateway's edge token")
    ] = None,
    agent_id: Annotated[str | None, typer.Option(help="id to register under (default: hostname-port)")] = None,
    advertise: Annotated[
        str | None, typer.Option(help="grpc://host:port the gateway should reach (default: listen address)")
    ] = None,
    local_http_port: Annotated[
        int | None, typer.Option(help="serve this device's SDK (private prompts) on 127.0.0.1:PORT, e.g. 50062")
    ] = None,
    metrics_port: Annotated[int | None, typer.Option(help="serve Prometheus /metrics on this port")] = None,
    log_level: str = "info",
) -> None:
    """An edge agent: exports the checkpoint to ONNX (cached) and serves it on onnxruntime."""
    from edge_agent.export import ExportError
    from edge_agent.providers import DEFAULT_PRIORITY, ProviderError
    from edge_agent.server import RegisterWith, run
    from modeling.model_config import CheckpointError, UnsupportedModelError

    setup_logging(log_level)
    priority = tuple(p.strip() for p in providers.split(",") if p.strip()) if providers else DEFAULT_PRIORITY
    register = None
    if register_url:
        if not register_token:
            fail("--register-url needs --register-token (or TANDEM_EDGE_TOKEN)")
        register = RegisterWith(register_url, register_token, agent_id, advertise)
    try:
        quant = quantization(bits, block_size, accuracy_level, keep_lm_head, quantize_embedding)
        run(
            model,
            host,
            port,
            cache_dir,
            model_name(model, model_id),
            priority,
            require_npu,
            register,
            quant,
            local_http_port,
            metrics_port,
        )
    except (ProviderError, ExportError, CheckpointError, UnsupportedModelError) as exc:
        fail(exc, 1, exc)
    except OSError as exc:  # the export cache full or read-only (a review: 120 lines of traceback), a port in use
        where = exc.filename or (cache_dir if exc.errno in _DISK_ERRORS else None)
        fail(f"{where}: {exc.strerror or exc}" if where else (exc.strerror or str(exc)), 1, exc)
