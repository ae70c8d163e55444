"""`tandem model`: push a checkpoint to an object store, fetch one into the node's cache, write the demo model."""

from pathlib import Path
from typing import Annotated

import typer

from tandem.cli.common import fail, setup_logging

app = typer.Typer(help="Model checkpoints.", no_args_is_help=True)


@app.command("push")
def push(
    checkpoint: Annotated[Path, typer.Argument(exists=True, file_okay=False, help="checkpoint directory")],
    address: Annotated[str, typer.Argument(help="s3://bucket/path/to/model (AWS_ENDPOINT_URL for MinIO etc.)")],
) -> None:
    """Upload a checkpoint to an object store; print its pinned reference (s3://…@sha256:…)."""
    from tandem.model_store import StoreError
    from tandem.model_store import push as push_checkpoint

    try:
        typer.echo(str(push_checkpoint(checkpoint, address)))
    except StoreError as exc:
        fail(exc, 1, exc)


@app.command("fetch")
def fetch(
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

    setup_logging(log_level)
    try:
        store = ModelStore.from_env()
        store = replace(store, cache_dir=cache_dir or store.cache_dir, verify=verify or store.verify)
        typer.echo(str(store.resolve(reference)))
    except StoreError as exc:
        fail(exc, 1, exc)


@app.command("demo")
def demo(out_dir: Path) -> None:
    """Write the deterministic tiny Llama demo checkpoint to OUT_DIR."""
    from serving.atomic_dir import ForeignFolder
    from tandem.demo_model import DemoBuildFailed, write_demo_checkpoint_apart

    try:
        write_demo_checkpoint_apart(out_dir)
    except (ForeignFolder, DemoBuildFailed) as exc:
        fail(exc, 1, exc)
    except KeyboardInterrupt:
        fail(f"stopped; nothing half-built is kept in {out_dir}", 130)
    typer.echo(f"wrote demo checkpoint to {out_dir}")
