"""Weight-only quantization of an exported fp32 decoder: INT4/INT8 MatMulNBits, or fp16.

Applied as a transform after export, never inside the model code. INT4/INT8
use onnxruntime's `MatMulNBitsQuantizer` (symmetric, per block of
`block_size` input channels); the LM head can stay fp32 (`keep_lm_head`),
which is where quantization error shows most in the logits. INT4 can also
quantize the embedding table (`quantize_embedding`: onnxruntime's
GatherBlockQuantized, blocks along the hidden size, as llama.cpp's Q4_0
does). Left fp32 it is two thirds of a 100M-parameter INT4 file (146 MB
against 63 MB; docs/benchmarks.md); it is not the default because on the
64-wide demo model it takes the logits' cosine with fp32 from 0.982 to 0.972,
under the 0.98 the INT4 export is held to.
"""

import logging
from dataclasses import asdict, dataclass
from pathlib import Path

LM_HEAD_NODE = "lm_head/MatMul"  # the end of the LM head's node name (the exporter prefixes module scopes)


@dataclass(frozen=True)
class Quantization:
    bits: int = 32
    block_size: int = 32
    accuracy_level: int = 4  # MatMulNBits compute type: 4 = int8 activations, fastest on CPU
    keep_lm_head: bool = False
    quantize_embedding: bool = False  # INT4 only: the embedding table in INT4 too

    @property
    def quantizes_embedding(self) -> bool:
        return self.bits == 4 and self.quantize_embedding

    def __post_init__(self) -> None:
        if self.bits not in (4, 8, 16, 32):
            raise ValueError(f"bits must be 4, 8, 16 or 32, not {self.bits}")
        if self.block_size not in (16, 32, 64, 128, 256):  # onnxruntime's MLAS kernels' (512 failed after the export)
            raise ValueError(f"block size must be 16, 32, 64, 128 or 256, not {self.block_size}")
        # (a review) each was accepted and did nothing, or what onnxruntime does with it is undefined
        if self.accuracy_level not in range(5):
            raise ValueError(
                f"accuracy level must be 0 to 4 (MatMulNBits: 1 fp32, 2 fp16, 3 bf16, 4 int8 compute), not "
                f"{self.accuracy_level}"
            )
        if self.quantize_embedding and self.bits != 4:
            raise ValueError(f"--quantize-embedding needs --bits 4 (the embedding table in INT4), not {self.bits}")

    @property
    def name(self) -> str:
        """The export variant's folder name, e.g. int4-b32-a4."""
        if self.bits == 32:
            return "fp32"
        if self.bits == 16:
            return "fp16"
        return (
            f"int{self.bits}-b{self.block_size}-a{self.accuracy_level}"
            + ("-head32" if self.keep_lm_head else "")
            + ("-emb4" if self.quantizes_embedding else "")
        )

    def as_dict(self) -> dict:
        return asdict(self) | {
            "symmetric": self.bits in (4, 8),
            "lm_head": "fp32" if self.keep_lm_head or self.bits == 32 else "quantized",
            "embedding": "quantized" if self.quantizes_embedding else ("fp16" if self.bits == 16 else "fp32"),
        }


# Past this many bytes of weights, a model's weights go to one file beside its graph (`model.onnx.data`): one
# protobuf holds at most 2 GB, and an INT4 export of a model with a large vocabulary (its embedding table fp32)
# failed to save at all (`EncodeError: Failed to serialize proto`: a review).
EXTERNAL_DATA_BYTES = 1 << 30


def external_data_file(out_model: Path) -> str:
    return Path(out_model).name + ".data"


def _weighs_more_than(model, most: int) -> bool:
    return sum(tensor.ByteSize() for tensor in model.graph.initializer) > most


def save_model(model, out_model: Path) -> None:
    """The model in one file, or (past EXTERNAL_DATA_BYTES of weights) its graph and one file of its weights."""
    import onnx

    if not _weighs_more_than(model, EXTERNAL_DATA_BYTES):
        onnx.save_model(model, str(out_model))
        return
    onnx.save_model(model, str(out_model), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=external_data_file(out_model), size_threshold=1024)  # fmt: skip


def quantize(fp32_model: Path, out_model: Path, q: Quantization) -> None:
    """`out_model` (with `out_model.data` beside it where the weights are large) from the fp32 export, whose weights
    torch may have written one file each beside it: read here, they are the caller's to remove."""
    import onnx  # here, not at the top: the CLI reads INT4's defaults without paying for onnx (about 1 s)

    model = onnx.load(str(fp32_model))
    if q.bits == 32:
        save_model(model, out_model)
        return
    if q.bits == 16:
        from onnxruntime.transformers.float16 import convert_float_to_float16

        save_model(convert_float_to_float16(model, keep_io_types=True), out_model)
        return
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quiet = logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer")
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # it logs one INFO line per node
    try:
        quantizer = MatMulNBitsQuantizer(
            model,
            bits=q.bits,
            block_size=q.block_size,
            is_symmetric=True,
            accuracy_level=q.accuracy_level,
            nodes_to_exclude=[n.name for n in model.graph.node if n.name.endswith(LM_HEAD_NODE)]
            if q.keep_lm_head
            else [],
            op_types_to_quantize=("MatMul", "Gather") if q.quantizes_embedding else ("MatMul",),
            quant_axes=(("MatMul", 0), ("Gather", 1)),  # the embedding in blocks along the hidden size
        )
        quantizer.process()
    finally:
        quiet.setLevel(level)
    big = _weighs_more_than(quantizer.model.model, EXTERNAL_DATA_BYTES)
    quantizer.model.save_model_to_file(str(out_model), use_external_data_format=big)  # its weights in MODEL.data


def linear_weight_bytes(model_path: Path) -> int:
    """Bytes of the weights of the model's linear layers (MatMul and MatMulNBits inputs), the part quantization shrinks."""
    import onnx

    model = onnx.load(str(model_path))
    initializers = {i.name: i for i in model.graph.initializer}
    names = set()
    for node in model.graph.node:
        if node.op_type == "MatMul" and len(node.input) > 1 and node.input[1] in initializers:
            names.add(node.input[1])
        elif node.op_type == "MatMulNBits":
            names.update(n for n in node.input[1:] if n in initializers)
    return sum(len(initializers[n].raw_data) or onnx.numpy_helper.to_array(initializers[n]).nbytes for n in names)


FP32 = Quantization(bits=32)
INT4 = Quantization(bits=4, block_size=32, accuracy_level=4)
