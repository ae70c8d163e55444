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

ModelDir = Annotated[
    Path, typer.Option("--model", help="Hugging Face checkpoint directory", exists=True, file_okay=False)
]
DEFAULT_CACHE = Path.home() / ".cache" / "tandem"


def _logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


@app.command()
def up(
    state_dir: Annotated[Path, typer.Option(help="where the demo model, exports and logs go")] = Path(".tandem"),
    policy: Annotated[Path, typer.Option(help="policy YAML")] = Path("policies/default.yaml"),
) -> None:
    """Run gateway + cloud worker + edge agent on loopback with the demo model. Ctrl-C stops all."""
    from tandem.stack import run_stack

    raise typer.Exit(run_stack(state_dir, policy))


@app.command()
def gateway(
    model: ModelDir,
    policy: Annotated[Path, typer.Option(help="policy YAML", exists=True, dir_okay=False)] = Path(
        "policies/default.yaml"
    ),
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
) -> None:
    """The OpenAI-compatible gateway. Other settings: TANDEM_* variables (docs/operations.md)."""
    from gateway.config import Settings
    from gateway.policy.loader import PolicyError, load_policy
    from gateway.server import run

    _logging(log_level)
    try:
        load_policy(policy)  # fail before binding the port, with the precise error
    except PolicyError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    run(Settings(model_dir=model, policy_file=policy, host=host, port=port), log_level)


@app.command("cloud-worker")
def cloud_worker(
    model: ModelDir, host: str = "127.0.0.1", port: int = 50051, model_id: str | None = None, log_level: str = "info"
) -> None:
    """A cloud worker serving the checkpoint over the Worker gRPC service."""
    from cloud_worker.server import run

    _logging(log_level)
    run(model, host, port, model_id)


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
    log_level: str = "info",
) -> None:
    """An edge agent: exports the checkpoint to ONNX (cached) and serves it on onnxruntime."""
    from edge_agent.providers import DEFAULT_PRIORITY, ProviderError
    from edge_agent.server import run

    _logging(log_level)
    priority = tuple(p.strip() for p in providers.split(",")) if providers else DEFAULT_PRIORITY
    try:
        run(model, host, port, cache_dir, model_id, priority, require_npu)
    except ProviderError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


@model_app.command("demo")
def model_demo(out_dir: Path) -> None:
    """Write the deterministic tiny Llama demo checkpoint to OUT_DIR."""
    from tandem.demo_model import write_demo_checkpoint

    write_demo_checkpoint(out_dir)
    typer.echo(f"wrote demo checkpoint to {out_dir}")


@edge_app.command("export")
def edge_export(checkpoint: Annotated[Path, typer.Argument(exists=True, file_okay=False)], out: Path) -> None:
    """Export a checkpoint to ONNX with explicit past/present KV (fp32)."""
    from edge_agent.export import export_onnx

    export_onnx(checkpoint, out)
    typer.echo(f"exported {checkpoint} to {out}")


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


if __name__ == "__main__":
    app()
