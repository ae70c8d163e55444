"""`tandem edge`: export a checkpoint to ONNX, quantized; the quantization options `edge-agent` shares, whose defaults
are edge_agent.quantize.INT4's."""

from pathlib import Path
from typing import Annotated

import typer

from edge_agent.quantize import INT4
from tandem.cli.common import fail

app = typer.Typer(help="Edge models.", no_args_is_help=True)
Bits = Annotated[int, typer.Option(help="4 or 8: MatMulNBits weight-only; 16: fp16; 32: fp32")]
BlockSize = Annotated[
    int, typer.Option(help="quantization block size (input channels per scale): 16, 32, 64, 128 or 256")
]
AccuracyLevel = Annotated[int, typer.Option(help="MatMulNBits accuracy level (4: int8 compute, fastest on CPU)")]
KeepLmHead = Annotated[bool, typer.Option(help="keep the LM head in fp32")]
QuantizeEmbedding = Annotated[bool, typer.Option(help="INT4: the embedding table in INT4 too (a much smaller file)")]


def quantization(bits: int, block_size: int, accuracy_level: int, keep_lm_head: bool, quantize_embedding: bool = False):
    from edge_agent.quantize import Quantization

    try:
        return Quantization(bits, block_size, accuracy_level, keep_lm_head, quantize_embedding)
    except ValueError as exc:
        fail(exc, 2, exc)


@app.command("export")
def export(
    checkpoint: Annotated[Path, typer.Argument(exists=True, file_okay=False)],
    out: Path,
    bits: Bits = INT4.bits,
    block_size: BlockSize = INT4.block_size,
    accuracy_level: AccuracyLevel = INT4.accuracy_level,
    keep_lm_head: KeepLmHead = INT4.keep_lm_head,
    quantize_embedding: QuantizeEmbedding = INT4.quantize_embedding,
) -> None:
    """Export a checkpoint to ONNX with explicit past/present KV, quantized (INT4 by default), with a manifest."""
    import json

    from edge_agent.export import MANIFEST_NAME, ExportError, export_onnx
    from modeling.model_config import CheckpointError, UnsupportedModelError

    try:
        export_onnx(checkpoint, out, quantization(bits, block_size, accuracy_level, keep_lm_head, quantize_embedding))
    except (ExportError, CheckpointError, UnsupportedModelError) as exc:
        fail(exc, 1, exc)
    except OSError as exc:  # a folder it cannot write (read-only, full), or a path under a file
        fail(f"{exc.filename or out}: {exc.strerror or exc}", 1, exc)
    sizes = json.loads((out / MANIFEST_NAME).read_text())["sizes"]
    ratio = sizes["linear_weight_bytes"] / sizes["fp32_linear_weight_bytes"]
    typer.echo(f"exported {checkpoint} to {out}: {sizes['model_bytes'] / 1e6:.1f} MB, linear weights {ratio:.2f}x fp32")
