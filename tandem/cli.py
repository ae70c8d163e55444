"""The `tandem` command: every process and tool behind one CLI."""

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Tandem: hybrid cloud-edge LLM serving.", no_args_is_help=True, add_completion=False)
model_app = typer.Typer(help="Model checkpoints.", no_args_is_help=True)
edge_app = typer.Typer(help="Edge models.", no_args_is_help=True)
policy_app = typer.Typer(help="Routing policies.", no_args_is_help=True)
app.add_typer(model_app, name="model")
app.add_typer(edge_app, name="edge")
app.add_typer(policy_app, name="policy")
keys_app = typer.Typer(help="API keys (stored hashed).", no_args_is_help=True)
app.add_typer(keys_app, name="keys")


def _resolve(reference: str, only: tuple[str, ...] | None = None) -> Path:
    """A checkpoint directory, or an s3:// reference fetched through the model store's tiers."""
    from tandem.model_store import ModelStore, StoreError

    try:
        return ModelStore.from_env().resolve(reference, only)  # the store's locks live as long as the process
    except StoreError as exc:
        raise typer.BadParameter(str(exc)) from exc


def _resolve_model(value: str) -> Path:  # typer callbacks take the value alone
    return _resolve(value)


def _resolve_tokenizer(value: str) -> Path:
    from tandem.model_store import TOKENIZER_FILES

    return _resolve(value, TOKENIZER_FILES)


MODEL_HELP = "checkpoint directory, or s3://bucket/path/model[@sha256:DIGEST] (fetched and cached; docs/operations.md)"
ModelDir = Annotated[str, typer.Option("--model", help=MODEL_HELP, callback=_resolve_model)]
TokenizerDir = Annotated[
    str, typer.Option("--model", help=f"{MODEL_HELP}; only its tokenizer is used", callback=_resolve_tokenizer)
]
DEFAULT_CACHE = Path.home() / ".cache" / "tandem"
Bits = Annotated[int, typer.Option(help="4 or 8: MatMulNBits weight-only; 16: fp16; 32: fp32")]
BlockSize = Annotated[int, typer.Option(help="quantization block size (input channels per scale)")]
AccuracyLevel = Annotated[int, typer.Option(help="MatMulNBits accuracy level (4: int8 compute, fastest on CPU)")]
KeepLmHead = Annotated[bool, typer.Option(help="keep the LM head in fp32")]
QuantizeEmbedding = Annotated[bool, typer.Option(help="INT4: the embedding table in INT4 too (a much smaller file)")]


def _logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


@app.command()
def up(
    state_dir: Annotated[Path, typer.Option(help="where the demo model, exports and logs go")] = Path(".tandem"),
    policy: Annotated[Path, typer.Option(help="policy YAML")] = Path("policies/default.yaml"),
    model: Annotated[
        list[Path] | None,
        typer.Option(help="a further checkpoint to serve (repeatable): a cloud worker and a pool of its own"),
    ] = None,
) -> None:
    """Run gateway + cloud worker + edge agent on loopback with the demo model. Ctrl-C stops all."""
    from tandem.stack import run_stack

    raise typer.Exit(run_stack(state_dir, policy, model))


@app.command()
def gateway(
    model: TokenizerDir,
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
    from gateway.policy.loader import PolicyError, load_policy
    from gateway.server import run

    _logging(log_level)
    given = {name: value for name, value in (("policy_file", policy), ("host", host), ("port", port)) if value is not None}
    try:
        settings = Settings(model_dir=model, **given)
        load_policy(settings.policy_file)  # fail before binding the port, with the precise error
    except ValidationError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except (PolicyError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    run(settings, log_level)


@app.command("cloud-worker")
def cloud_worker(
    model: ModelDir,
    host: str = "127.0.0.1",
    port: int = 50051,
    model_id: str | None = None,
    block_size: Annotated[int, typer.Option(help="KV block size in tokens (also the prefix-hint granularity)")] = 16,
    kv_cache_mb: Annotated[int, typer.Option(help="KV pool size per rank, when --num-kv-blocks is not given")] = 512,
    num_kv_blocks: Annotated[int | None, typer.Option(help="KV pool size in blocks (overrides --kv-cache-mb)")] = None,
    max_batched_tokens: Annotated[int, typer.Option(help="token budget of one step (prefill chunks + decodes)")] = 512,
    max_num_seqs: Annotated[int, typer.Option(help="running sequences at most")] = 256,
    tp: Annotated[int, typer.Option(help="tensor parallel ranks; the worker starts them itself")] = 1,
    quantize: Annotated[str, typer.Option(help="none, or int8 (weight-only, per channel)")] = "none",
    device: Annotated[str | None, typer.Option(help="cpu or cuda (default: cuda when available)")] = None,
    cuda_graphs: Annotated[bool, typer.Option(help="replay decode steps from CUDA graphs (CUDA, no TP)")] = True,
    cpu_linear: Annotated[
        str, typer.Option(help="CPU linears: auto (oneDNN, weights packed once, where torch has it) or aten")
    ] = "auto",
    redis_url: Annotated[
        str | None, typer.Option(envvar="REDIS_URL", help="publish prefix hints here (unset: not published)")
    ] = None,
    worker_id: Annotated[
        str | None,
        typer.Option(help="host:port gateways dial, the id hints are published under (default: listen address)"),
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
    from cloud_worker.engine.config import EngineConfig
    from cloud_worker.loader import CheckpointError
    from cloud_worker.model_config import UnsupportedModelError
    from cloud_worker.parallel.tensor_parallel import TensorParallelError
    from cloud_worker.server import run

    _logging(log_level)
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
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    try:
        if serve_openai and not metrics_port:
            raise ValueError("--serve-openai serves on --metrics-port: give one")
        run(model, host, port, model_id, config, redis_url, worker_id, hint_ttl_s, metrics_port, serve_openai)
    except (CheckpointError, UnsupportedModelError, TensorParallelError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


@app.command("sim-worker")
def sim_worker(
    model: TokenizerDir,
    host: str = "127.0.0.1",
    port: int = 50051,
    http_port: Annotated[
        int | None, typer.Option(help="also serve SGLang's /generate here (for sglang-router)")
    ] = None,
    model_id: Annotated[str | None, typer.Option(help="model id to report (default: the directory's name)")] = None,
    num_kv_blocks: Annotated[int, typer.Option(help="KV pool in blocks: small enough and placement matters")] = 1024,
    block_size: int = 16,
    prefill_us_per_token: Annotated[float, typer.Option(help="simulated cost of one uncached prompt token")] = 200.0,
    decode_us_per_token: Annotated[float, typer.Option(help="simulated cost of one output token")] = 2000.0,
    redis_url: Annotated[str | None, typer.Option(envvar="REDIS_URL", help="publish prefix hints here")] = None,
    worker_id: Annotated[str | None, typer.Option(help="host:port gateways dial (default: listen address)")] = None,
    hint_ttl_s: float = 30.0,
    log_level: str = "info",
) -> None:
    """A simulated worker: the engine's real scheduler and block manager, a sleep for the model."""
    from cloud_worker.sim_worker import run
    from tandem.checkpoint import model_id_for

    _logging(log_level)
    run(
        model,
        host,
        port,
        http_port,
        model_id_for(model, model_id),
        num_kv_blocks,
        block_size,
        prefill_us_per_token,
        decode_us_per_token,
        redis_url,
        worker_id,
        hint_ttl_s,
    )


@app.command("edge-agent")
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
    bits: Bits = 4,
    block_size: BlockSize = 32,
    accuracy_level: AccuracyLevel = 4,
    keep_lm_head: KeepLmHead = False,
    quantize_embedding: QuantizeEmbedding = False,
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

    _logging(log_level)
    priority = tuple(p.strip() for p in providers.split(",")) if providers else DEFAULT_PRIORITY
    register = None
    if register_url:
        if not register_token:
            typer.echo("error: --register-url needs --register-token (or TANDEM_EDGE_TOKEN)", err=True)
            raise typer.Exit(1)
        register = RegisterWith(register_url, register_token, agent_id, advertise)
    try:
        quantization = _quantization(bits, block_size, accuracy_level, keep_lm_head, quantize_embedding)
        run(
            model,
            host,
            port,
            cache_dir,
            model_id,
            priority,
            require_npu,
            register,
            quantization,
            local_http_port,
            metrics_port,
        )
    except (ProviderError, ExportError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


@model_app.command("push")
def model_push(
    checkpoint: Annotated[Path, typer.Argument(exists=True, file_okay=False, help="checkpoint directory")],
    address: Annotated[str, typer.Argument(help="s3://bucket/path/to/model (AWS_ENDPOINT_URL for MinIO etc.)")],
) -> None:
    """Upload a checkpoint to an object store; print its pinned reference (s3://…@sha256:…)."""
    from tandem.model_store import StoreError, push

    try:
        typer.echo(str(push(checkpoint, address)))
    except StoreError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


@model_app.command("fetch")
def model_fetch(
    reference: Annotated[str, typer.Argument(help="s3://bucket/path/to/model[@sha256:DIGEST]")],
    cache_dir: Annotated[
        Path | None, typer.Option(help="node-local cache (default: TANDEM_MODEL_CACHE_DIR or ~/.cache/tandem/models)")
    ] = None,
    verify: Annotated[str | None, typer.Option(help="stamp (sizes, times) or full (re-hash every file)")] = None,
    log_level: str = "info",
) -> None:
    """Bring a model into the node-local cache (what a cache warmer runs); print its directory."""
    from dataclasses import replace

    from tandem.model_store import ModelStore, StoreError

    _logging(log_level)
    try:
        store = ModelStore.from_env()
        store = replace(store, cache_dir=cache_dir or store.cache_dir, verify=verify or store.verify)
        typer.echo(str(store.resolve(reference)))
    except StoreError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


@model_app.command("demo")
def model_demo(out_dir: Path) -> None:
    """Write the deterministic tiny Llama demo checkpoint to OUT_DIR."""
    from tandem.demo_model import write_demo_checkpoint

    write_demo_checkpoint(out_dir)
    typer.echo(f"wrote demo checkpoint to {out_dir}")


def _quantization(
    bits: int, block_size: int, accuracy_level: int, keep_lm_head: bool, quantize_embedding: bool = False
):
    from edge_agent.quantize import Quantization

    try:
        return Quantization(bits, block_size, accuracy_level, keep_lm_head, quantize_embedding)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc


@edge_app.command("export")
def edge_export(
    checkpoint: Annotated[Path, typer.Argument(exists=True, file_okay=False)],
    out: Path,
    bits: Bits = 4,
    block_size: BlockSize = 32,
    accuracy_level: AccuracyLevel = 4,
    keep_lm_head: KeepLmHead = False,
    quantize_embedding: QuantizeEmbedding = False,
) -> None:
    """Export a checkpoint to ONNX with explicit past/present KV, quantized (INT4 by default), with a manifest."""
    import json

    from edge_agent.export import MANIFEST_NAME, export_onnx

    export_onnx(checkpoint, out, _quantization(bits, block_size, accuracy_level, keep_lm_head, quantize_embedding))
    sizes = json.loads((out / MANIFEST_NAME).read_text())["sizes"]
    ratio = sizes["linear_weight_bytes"] / sizes["fp32_linear_weight_bytes"]
    typer.echo(f"exported {checkpoint} to {out}: {sizes['model_bytes'] / 1e6:.1f} MB, linear weights {ratio:.2f}x fp32")


@policy_app.command("check")
def policy_check(file: Path) -> None:
    """Validate a policy file; exit 1 with the precise error if it is not valid."""
    from gateway.policy.loader import PolicyError, load_policy

    try:
        policy = load_policy(file)
    except PolicyError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"{file}: ok ({len(policy.pools)} pools, {len(policy.rules)} rules)")


def _load_policy_or_exit(path: Path):
    from gateway.policy.loader import PolicyError, load_policy

    try:
        return load_policy(path)
    except PolicyError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


@policy_app.command("explain")
def policy_explain(
    file: Annotated[Path, typer.Argument(help="policy YAML")],
    message: Annotated[str, typer.Option(help="the user message")],
    model: ModelDir,
    max_tokens: int = 128,
    privacy: Annotated[str | None, typer.Option(help="privacy tags, as X-Tandem-Privacy")] = None,
    device: Annotated[str | None, typer.Option(help='device JSON, as X-Tandem-Device, e.g. {"npu": true}')] = None,
    tenant: str = "default",
) -> None:
    """Where a chat request would go under FILE, and why (offline: backends assumed healthy)."""
    import json

    from gateway.chat_tokenizer import ChatTokenizer
    from gateway.classify.classify import classify
    from gateway.errors import GatewayError
    from gateway.policy.explain import explain
    from gateway.routing.candidate import Candidate

    policy = _load_policy_or_exit(file)
    prompt_ids = ChatTokenizer(model).encode_chat([{"role": "user", "content": message}])
    try:
        features = classify(
            policy,
            text=message,
            prompt_tokens=len(prompt_ids),
            max_tokens=max_tokens,
            privacy_header=privacy,
            device_header=device,
            tenant=tenant,
        )
    except GatewayError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(1) from exc

    candidates = {
        name: [Candidate(url, is_healthy=True, kind=pool.kind) for url in pool.endpoints]
        for name, pool in policy.pools.items()
    }
    typer.echo(json.dumps(explain(policy, features, candidates), indent=2))


@policy_app.command("replay")
def policy_replay(
    trace: Annotated[
        Path, typer.Argument(help="decision log (JSON lines) from TANDEM_DECISION_LOG", exists=True, dir_okay=False)
    ],
    policy: Annotated[Path, typer.Option("--policy", help="policy to replay")],
    against: Annotated[Path | None, typer.Option("--against", help="a second policy to compare with")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object instead of tables")] = False,
) -> None:
    """Replay recorded decisions against a policy (and compare with another) before it serves anyone."""
    import json

    from gateway.policy.replay import TraceError, differences, read_trace, replay
    from tandem.replay_report import print_report

    policies = {"policy": _load_policy_or_exit(policy)}
    if against:
        policies["against"] = _load_policy_or_exit(against)
    try:
        features = read_trace(trace)
    except TraceError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    results = {name: replay(p, features) for name, p in policies.items()}
    out = {name: report.as_dict() for name, (report, _) in results.items()}
    if against:
        out["differences"] = differences(results["policy"][1], results["against"][1])
    if as_json:
        typer.echo(json.dumps(out, indent=2))
    else:
        print_report(out, {"policy": str(policy), "against": str(against) if against else None})


@keys_app.command("new")
def keys_new(tenant: str) -> None:
    """Make a key for TENANT: prints the key (give it to the tenant) and the line for the tenants file."""
    from gateway.tenants import hash_key, new_key

    key = new_key()
    typer.echo(f"key (shown once): {key}")
    typer.echo(f"tenants file:     {tenant}: {{keys: ['{hash_key(key)}']}}")


@keys_app.command("hash")
def keys_hash(key: str) -> None:
    """Print the hash of an existing key, as the tenants file stores it."""
    from gateway.tenants import hash_key

    typer.echo(hash_key(key))


if __name__ == "__main__":
    app()
