"""Compile every Triton kernel for NVIDIA GPUs ahead of time, on a machine without one.

The interpreter (TRITON_INTERPRET=1) runs the kernels' Python semantics on CPU, but not the compiler:
`tl.dot` shape and dtype rules, layout conversions, what a type may be cast to, what PTX and ptxas
accept. This compiles each kernel, in the variants the engine launches on CUDA (bf16 activations,
Llama-3-8B and small-model head shapes, split and unsplit decode), through Triton's NVIDIA backend down
to a cubin (ptxas ships with Triton), for Hopper (sm_90) and Ampere (sm_80).

    python -m tandem_kernels.aot_check          # exit 1 and the first error per kernel when one does not compile

Run in a process of its own: TRITON_INTERPRET must be unset when the kernels are defined.
"""

import os
import sys
import time

if os.environ.get("TRITON_INTERPRET") == "1":
    raise SystemExit("tandem_kernels.aot_check: unset TRITON_INTERPRET (the interpreter replaces the compiler)")

TARGETS = ((90, "sm_90"), (80, "sm_80"))


def _in_fp32(signature: dict[str, str]) -> dict[str, str]:
    """A kernel's signature for an fp32 model: its bf16 tensors in fp32."""
    return {name: "*fp32" if kind == "*bf16" else kind for name, kind in signature.items()}


def cases():
    """(name, kernel, signature, constexprs) for every variant the engine launches."""
    from tandem_kernels import int8_linear, kv_write, paged_attention, rms_norm, rotary, sampling, silu_and_mul

    decode, combine = paged_attention._decode_kernel()
    decode_sig = {
        "q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "tables_ptr": "*i64", "lens_ptr": "*i64",
        "out_ptr": "*bf16", "part_ptr": "*fp32", "stats_ptr": "*fp32",
        "stride_q_seq": "i32", "stride_q_head": "i32", "stride_kv_head": "i32", "stride_kv_block": "i32",
        "stride_kv_slot": "i32", "stride_table": "i32", "scale": "fp32", "num_splits": "i32", "num_heads": "i32",
        "GROUP": "constexpr", "GROUP_PAD": "constexpr", "BLOCK_SIZE": "constexpr", "HEAD_DIM": "constexpr",
        "SPLIT": "constexpr", "KEYS": "constexpr", "DOT": "constexpr",
    }  # fmt: skip
    for shape, group, head_dim in (("llama3-8b", 4, 128), ("0.5b", 7, 64)):
        for split in (False, True):
            keys = paged_attention.decode_keys(16, head_dim)
            consts = {"GROUP": group, "GROUP_PAD": 16, "BLOCK_SIZE": 16, "HEAD_DIM": head_dim, "SPLIT": split,
                      "KEYS": keys, "DOT": None}  # fmt: skip
            yield f"paged decode {shape} split={split}", decode, decode_sig, consts
    fp32 = _in_fp32(decode_sig)
    consts = {"GROUP": 4, "GROUP_PAD": 16, "BLOCK_SIZE": 16, "HEAD_DIM": 64, "SPLIT": True, "DOT": "ieee",
              "KEYS": paged_attention.decode_keys(16, 64)}  # fmt: skip
    yield "paged decode fp32", decode, fp32, consts
    yield (
        "paged decode combine",
        combine,
        {
            "part_ptr": "*fp32",
            "stats_ptr": "*fp32",
            "out_ptr": "*bf16",
            "stride_q_seq": "i32",
            "stride_q_head": "i32",
            "num_splits": "i32",
            "HEAD_DIM": "constexpr",
        },  # fmt: skip
        {"HEAD_DIM": 128},
    )
    prefill_sig = {
        "q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "tables_ptr": "*i64", "lens_ptr": "*i64",
        "tiles_ptr": "*i64", "out_ptr": "*bf16", "stride_q_tok": "i32", "stride_q_head": "i32",
        "stride_kv_head": "i32", "stride_kv_block": "i32", "stride_kv_slot": "i32", "stride_table": "i32",
        "scale": "fp32", "GROUP": "constexpr", "BLOCK_SIZE": "constexpr", "HEAD_DIM": "constexpr", "TILE": "constexpr",
        "DOT": "constexpr",
    }  # fmt: skip
    for head_dim in (128, 64):
        consts = {
            "GROUP": 4,
            "BLOCK_SIZE": 16,
            "HEAD_DIM": head_dim,
            "TILE": paged_attention.PREFILL_TILE,
            "DOT": None,
        }
        yield f"paged prefill head_dim={head_dim}", paged_attention._prefill_kernel(), prefill_sig, consts
    fp32 = _in_fp32(prefill_sig)
    consts = {"GROUP": 4, "BLOCK_SIZE": 16, "HEAD_DIM": 64, "TILE": paged_attention.PREFILL_TILE, "DOT": "ieee"}
    yield "paged prefill fp32", paged_attention._prefill_kernel(), fp32, consts
    yield (
        "kv write",
        kv_write._kernel(),
        {
            "k_ptr": "*bf16",
            "v_ptr": "*bf16",
            "k_cache_ptr": "*bf16",
            "v_cache_ptr": "*bf16",
            "slots_ptr": "*i64",
            "stride_token": "i32",
            "stride_head": "i32",
            "stride_cache_head": "i32",
            "HEAD_DIM": "constexpr",
        },  # fmt: skip
        {"HEAD_DIM": 128},
    )
    yield (
        "rotary",
        rotary._kernel(),
        {
            "x_ptr": "*bf16",
            "cos_ptr": "*fp32",
            "sin_ptr": "*fp32",
            "out_ptr": "*bf16",
            "heads": "i32",
            "tokens": "i32",
            "HALF": "constexpr",
        },  # fmt: skip
        {"HALF": 64},
    )
    for has_res in (False, True):
        yield (
            f"rms norm residual={has_res}",
            rms_norm._kernel(),
            {
                "x_ptr": "*bf16",
                "res_ptr": "*bf16",
                "w_ptr": "*bf16",
                "out_ptr": "*bf16",
                "h_ptr": "*bf16",
                "hidden": "i32",
                "eps": "fp32",
                "HAS_RES": "constexpr",
                "BLOCK": "constexpr",
            },  # fmt: skip
            {"HAS_RES": has_res, "BLOCK": 4096},
        )
    yield (
        "silu and mul",
        silu_and_mul._kernel(),
        {"gate_ptr": "*bf16", "up_ptr": "*bf16", "out_ptr": "*bf16", "n": "i32", "BLOCK": "constexpr"},
        {"BLOCK": 1024},
    )
    for logits in ("fp32", "bf16"):
        yield (
            f"sampling logits={logits}",
            sampling._kernel(),
            {
                "logits_ptr": f"*{logits}",
                "temperature_ptr": "*fp32",
                "top_k_ptr": "*i64",
                "top_p_ptr": "*fp32",
                "min_p_ptr": "*fp32",
                "row_hash_ptr": "*i64",
                "out_ptr": "*i64",
                "vocab": "i32",
                "stride_row": "i32",
                "BLOCK": "constexpr",
                "SEARCH_BLOCK": "constexpr",
                "WAYS": "constexpr",
            },  # fmt: skip
            {"BLOCK": 1024, "SEARCH_BLOCK": 256, "WAYS": 16},
        )
    for block_m, has_bias in ((16, False), (64, True)):
        yield (
            f"int8 linear block_m={block_m} bias={has_bias}",
            int8_linear._kernel(),
            {
                "x_ptr": "*bf16",
                "w_ptr": "*i8",
                "scale_ptr": "*bf16",
                "bias_ptr": "*bf16",
                "out_ptr": "*bf16",
                "M": "i32",
                "N": "i32",
                "K": "i32",
                "stride_xm": "i32",
                "stride_wn": "i32",
                "stride_om": "i32",
                "HAS_BIAS": "constexpr",
                "BLOCK_M": "constexpr",
                "BLOCK_N": "constexpr",
                "BLOCK_K": "constexpr",
            },  # fmt: skip
            {"HAS_BIAS": has_bias, "BLOCK_M": block_m, "BLOCK_N": 64, "BLOCK_K": 64},
        )


def main() -> int:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    failed = 0
    for name, kernel, signature, constexprs in cases():
        for capability, label in TARGETS:
            started = time.perf_counter()
            try:
                source = ASTSource(fn=kernel, signature=signature, constexprs=constexprs)
                compiled = triton.compile(source, target=GPUTarget("cuda", capability, 32))
                size = len(compiled.asm["cubin"])
                print(f"ok    {label}  {name}  ({size} B cubin, {time.perf_counter() - started:.1f} s)", flush=True)
            except Exception as exc:  # noqa: BLE001 - report every kernel, then fail
                failed += 1
                lines = [line for line in str(exc).splitlines() if line.strip()]
                where, why = (lines[0], lines[-1]) if lines else ("", type(exc).__name__)  # "at L:C:", the message
                print(f"FAIL  {label}  {name}: {why} ({where.rstrip(':')})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
